"""Crawl throughput and memory.

    .venv/bin/python benchmarks/crawl_benchmarks.py speed [--pages 5000]
    .venv/bin/python benchmarks/crawl_benchmarks.py memory [--pages 1000]

speed: a local site of generated product pages (schema.org JSON-LD, no images) served on 127.0.0.1 by a
separate process; the production ``shop`` spider (extraction, timestamps, item pipelines, WARC archive) against
a do-nothing Scrapy spider that fetches the same sitemap URLs and yields nothing, same settings (robots.txt
obeyed, 16 concurrent requests, AutoThrottle off), in the same run.

memory: 1,000 JavaScript pages rendered through scrapy-playwright in Debian's chromium; the resident memory of
the crawl's whole process tree (Scrapy and every Chromium process) is sampled every 0.5 s; reported: after the
first 100 pages, the peak, and the growth between them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from lookbench_pipeline.crawl import CRAWLERS_DIR, spider_command
from lookbench_pipeline.demo.shop import write_js_pages

NOOP_SPIDER = '''
import scrapy
from scrapy.utils.sitemap import Sitemap

class NoopSpider(scrapy.Spider):
    name = "noop"
    def __init__(self, sitemap=None, *a, **kw):
        super().__init__(*a, **kw)
        self.sitemap = sitemap
    async def start(self):
        yield scrapy.Request(self.sitemap, callback=self.parse_sitemap)
    def parse_sitemap(self, response):
        for e in Sitemap(response.body):
            yield scrapy.Request(e["loc"], callback=self.parse)
    def parse(self, response):
        pass
'''


def write_pages(root: Path, n: int) -> None:
    (root / "p").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        ld = {"@context": "https://schema.org", "@type": "Product", "name": f"Blue striped shirt {i}",
              "sku": f"B-{i:05d}", "brand": {"@type": "Brand", "name": "Bench"},
              "offers": {"@type": "Offer", "price": f"{10 + i % 90}.95", "priceCurrency": "EUR"}}
        (root / "p" / f"{i:05d}.html").write_text(
            f"<!doctype html><html><head><meta charset='utf-8'><title>{ld['name']}</title>"
            f"<script type='application/ld+json'>{json.dumps(ld)}</script></head><body><h1>{ld['name']}</h1>"
            + "<p>" + "Lorem ipsum dolor sit amet. " * 40 + "</p></body></html>")
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n")
    port = os.environ.get("BENCH_PORT")
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        + "".join(f"<url><loc>http://127.0.0.1:{port}/p/{i:05d}.html</loc></url>\n" for i in range(n))
        + "</urlset>\n")


def serve(root: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "-b", "127.0.0.1", "-d", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return proc


COMMON = ["-s", "AUTOTHROTTLE_ENABLED=False", "-s", "CONCURRENT_REQUESTS=16", "-s",
          "CONCURRENT_REQUESTS_PER_DOMAIN=16", "-s", "DOWNLOAD_DELAY=0", "-s", "LOG_LEVEL=WARNING"]


def speed(n: int) -> None:
    port = 18000 + os.getpid() % 1000
    os.environ["BENCH_PORT"] = str(port)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_pages(tmp / "site", n)
        srv = serve(tmp / "site", port)
        try:
            site = tmp / "site.yaml"
            site.write_text(yaml.safe_dump({"name": "bench", "start_urls": [], "follow_links": False,
                                            "sitemap_urls": [f"http://127.0.0.1:{port}/sitemap.xml"],
                                            "allow_private_addresses": True, "max_pages": n + 10,
                                            "concurrency_per_domain": 16}))
            (tmp / "noop.py").write_text(NOOP_SPIDER)
            results = {}
            for name in ("noop", "production", "noop2", "production2"):
                t = time.perf_counter()
                if name.startswith("noop"):
                    subprocess.run([sys.executable, "-m", "scrapy", "runspider", str(tmp / "noop.py"), "-a",
                                    f"sitemap=http://127.0.0.1:{port}/sitemap.xml", *COMMON], check=True,
                                   cwd=tmp, capture_output=True)
                else:
                    out = tmp / name
                    cmd, env = spider_command(site, "", out, "bench-bot")
                    out.mkdir()
                    subprocess.run(cmd + COMMON, check=True, cwd=CRAWLERS_DIR, env=env, capture_output=True)
                    assert sum(1 for _ in open(out / "items.jsonl")) >= 2 * n
                results[name] = n / (time.perf_counter() - t)
        finally:
            srv.terminate()
    noop = max(results["noop"], results["noop2"])
    prod = max(results["production"], results["production2"])
    print(f"{n} product pages; best of two runs each (pages/s, including Scrapy start-up):")
    print(f"  do-nothing spider : {noop:7.1f} pages/s  (runs: {results['noop']:.1f}, {results['noop2']:.1f})")
    print(f"  production spider : {prod:7.1f} pages/s  (runs: {results['production']:.1f}, {results['production2']:.1f})")
    print(f"  ratio             : {prod / noop:.2f}")


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants, from /proc, in MB."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
        stack.extend(children.get(p, []))
    return total / 1024


def memory(n: int) -> None:
    port = 19000 + os.getpid() % 1000
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_js_pages(tmp / "site", n)
        (tmp / "site" / "sitemap.xml").write_text((tmp / "site" / "sitemap.xml").read_text().replace(
            "{{BASE}}", f"http://127.0.0.1:{port}"))
        srv = serve(tmp / "site", port)
        try:
            site = tmp / "site.yaml"
            site.write_text(yaml.safe_dump({"name": "js", "start_urls": [], "follow_links": False,
                                            "sitemap_urls": [f"http://127.0.0.1:{port}/sitemap.xml"],
                                            "allow_private_addresses": True, "render_js": True,
                                            "max_pages": n + 10}))
            out = tmp / "out"
            out.mkdir()
            cmd, env = spider_command(site, "", out, "bench-bot")
            t = time.perf_counter()
            proc = subprocess.Popen(cmd + ["-s", "AUTOTHROTTLE_ENABLED=False"], cwd=CRAWLERS_DIR, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            samples = []
            while proc.poll() is None:
                done = sum(1 for _ in open(out / "items.jsonl")) // 2 if (out / "items.jsonl").exists() else 0
                samples.append((done, tree_rss_mb(proc.pid)))
                time.sleep(0.5)
            elapsed = time.perf_counter() - t
            products = sum(1 for line in open(out / "items.jsonl") if '"kind": "product"' in line)
        finally:
            srv.terminate()
    after100 = next((m for d, m in samples if d >= 100), samples[-1][1])
    peak = max(m for _, m in samples)
    print(f"{n} JavaScript pages rendered in {elapsed:.0f} s; products extracted: {products}")
    print(f"  process-tree RSS after 100 pages: {after100:.0f} MB; peak: {peak:.0f} MB; growth: {peak - after100:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["speed", "memory"])
    ap.add_argument("--pages", type=int)
    a = ap.parse_args()
    if a.what == "speed":
        speed(a.pages or 5000)
    else:
        memory(a.pages or 1000)


if __name__ == "__main__":
    main()
