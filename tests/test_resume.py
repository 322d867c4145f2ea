"""A killed `lookbench build` resumes the same week's crawl: SIGKILL at random points, five times, then a run to
the end; the product set is the demo shop's, and no page finished before a kill is fetched again."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from lookbench_pipeline.config import DEMO_SITE
from lookbench_pipeline.crawl import repair_feed_tail
from lookbench_pipeline.warc import response_records, truncate_torn_tail

ROOT = Path(__file__).resolve().parents[1]


def _crawl_dir(data: Path) -> Path | None:
    found = sorted(data.glob("crawls/*/demo/crawl"))
    return found[0] if found else None


def _lines(crawl: Path | None) -> int:
    feed = crawl / "items.jsonl" if crawl else None
    return feed.read_bytes().count(b"\n") if feed and feed.is_file() else 0


def _fetches(warc: Path) -> Counter:
    """Complete response records per page path in the WARC (robots.txt, sitemaps and images left out)."""
    from urllib.parse import urlsplit

    c: Counter = Counter()
    if warc.is_file():
        for rec, _ in response_records([warc]):
            path = urlsplit(rec.rec_headers.get_header("WARC-Target-URI")).path
            if path.endswith(".html"):
                c[path] += 1
    return c


def test_torn_feed_line_and_warc_record_are_cut(tmp_path):
    feed = tmp_path / "items.jsonl"
    feed.write_bytes(b'{"kind": "page"}\n{"kind": "prod')
    assert repair_feed_tail(feed) == len(b'{"kind": "prod') and feed.read_bytes() == b'{"kind": "page"}\n'
    from lookbench_pipeline.warc import warcinfo_record

    whole = warcinfo_record({"site": "a"})
    warc = tmp_path / "crawl.warc.gz"
    warc.write_bytes(whole + whole[: len(whole) // 2])
    assert truncate_torn_tail(warc) == len(whole) // 2 and warc.read_bytes() == whole
    assert truncate_torn_tail(warc) == 0


def test_killed_build_resumes_the_weeks_crawl(tmp_path):
    from lookbench_crawlers.spiders.shop import finished_pages

    cfg = {"data_dir": str(tmp_path / "data"), "store": {"url": str(tmp_path / "store")}, "sites": [str(DEMO_SITE)]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config", str(tmp_path / "c.yaml")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    rng = random.Random(20261201)
    snapshots = []
    for _ in range(5):
        crawl = _crawl_dir(tmp_path / "data")
        before = finished_pages(crawl / "items.jsonl") if crawl else set()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        # a kill at a random point of the crawl: once the feed has grown by a random number of items (pages and
        # images are being fetched and written then), a random fraction of a second later
        grow = rng.randint(1, 12)
        start = _lines(_crawl_dir(tmp_path / "data"))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if _lines(_crawl_dir(tmp_path / "data")) >= start + grow:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is not None:  # the build got to its end before this kill: nothing left to interrupt
            break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        crawl = _crawl_dir(tmp_path / "data")
        if crawl:
            done = finished_pages(crawl / "items.jsonl")
            assert before <= done, "a page finished before the kill is no longer finished"
            snapshots.append((done, _fetches(crawl / "crawl.warc.gz")))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    crawl = _crawl_dir(tmp_path / "data")
    items = [json.loads(line) for line in (crawl / "items.jsonl").read_text().splitlines()]
    truth = json.loads((crawl.parent / "site" / "ground_truth.json").read_text())
    assert {i["sku"] for i in items if i["kind"] == "product"} == set(truth["products"])
    final = _fetches(crawl / "crawl.warc.gz")
    assert sum(1 for done, _ in snapshots if done) >= 3, "too few kills landed inside the crawl"
    for done, seen in snapshots:
        for key in done:
            path = urlsplit(key).path  # resume_key: the URL, less a loopback host's port
            if path.endswith(".html"):
                assert final[path] == seen[path], f"{path} was finished before a kill and fetched again"
    # a finished week is not crawled again: a second build reads it back
    mtime = (crawl / "items.jsonl").stat().st_mtime
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (crawl / "items.jsonl").stat().st_mtime == mtime
    # the crawl line (wrapped to the terminal's width) says nothing was fetched
    assert "read back: this week's crawl started" in " ".join(proc.stdout.split()), proc.stdout


def test_a_build_killed_alone_leaves_no_crawl_behind_and_resumes_whole(tmp_path):
    """`kill -9 <pid>` of the build alone (not its process group, as an OOM killer or a user does): its crawl child
    must not live on as an orphan, logging every remaining page as a fetch error against the demo server that died
    with the build, and the next build must still publish the demo shop's every product."""
    cfg = {"data_dir": str(tmp_path / "data"), "store": {"url": str(tmp_path / "store")}, "sites": [str(DEMO_SITE)]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config", str(tmp_path / "c.yaml")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and _lines(_crawl_dir(tmp_path / "data")) < 15:
            time.sleep(0.05)
        assert proc.poll() is None, "the build ended before the kill"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        gone = time.monotonic() + 20
        while time.monotonic() < gone:
            try:
                os.killpg(proc.pid, 0)  # a process of the build's session is still alive: the crawl
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the crawl outlived the killed build")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    crawl = _crawl_dir(tmp_path / "data")
    refused = [json.loads(line) for line in (crawl / "items.jsonl").read_text().splitlines() if "Refused" in line]
    assert not refused, f"pages logged as refused by the dead server: {refused[:3]}"
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    items = [json.loads(line) for line in (crawl / "items.jsonl").read_text().splitlines()]
    truth = json.loads((crawl.parent / "site" / "ground_truth.json").read_text())
    assert {i["sku"] for i in items if i["kind"] == "product"} == set(truth["products"])


def _archive(warc: Path, fetches: list[tuple[str, bytes, list[str]]]) -> None:
    """Write response records as the crawl's archive middleware does: (final URL, body, redirected-from URLs)."""
    from scrapy.http import HtmlResponse, Request

    from lookbench_crawlers.warc import WarcArchiveMiddleware

    mw = WarcArchiveMiddleware(str(warc), attempt="1")
    for url, body, chain in fetches:
        req = Request(url, meta={"redirect_urls": chain, "redirect_reasons": [301] * len(chain)} if chain else {})
        mw.process_response(req, HtmlResponse(url, body=body, headers={"Content-Type": "text/html"}, request=req))


class _Stats:
    def __init__(self):
        self.values: Counter = Counter()

    def inc_value(self, key, n=1):
        self.values[key] += n


def _resuming(warc: Path, done: set[str], origins: list[str]):
    from types import SimpleNamespace

    from lookbench_crawlers.replay import WarcReplayMiddleware
    from lookbench_pipeline.crawl import resume_key

    spider = SimpleNamespace(finished=lambda url: resume_key(url) in {resume_key(u) for u in done})
    crawler = SimpleNamespace(spider=spider, stats=_Stats())
    return WarcReplayMiddleware(crawler, [str(warc)], origins, resume=True)


def test_a_resume_answers_every_finished_page_from_the_archive_and_fetches_no_other(tmp_path):
    """Finished pages are not fetched again: one reached through a redirect (a sitemap URL that 301s) is answered
    with the archived redirect, then its record; a finished page without a response record (none should be: the
    safety net) is ignored, not fetched live, or the WARC would hold a page whose items the feed lacks. A page no
    attempt finished goes to the network."""
    import pytest
    from scrapy.exceptions import IgnoreRequest
    from scrapy.http import Request

    warc = tmp_path / "crawl.warc.gz"
    base = "http://127.0.0.1:40001"
    _archive(warc, [(f"{base}/p/new.html", b"<html>new</html>", [f"{base}/p/old.html"]),
                    (f"{base}/p/open.html", b"<html>killed before its items</html>", [])])
    later = "http://127.0.0.1:40002"  # the next attempt's server listens on another port
    mw = _resuming(warc, {f"{base}/p/new.html", f"{base}/p/timed-out.html"}, [base, later])
    redirect = mw.process_request(Request(f"{later}/p/old.html"))
    assert redirect.status == 301 and redirect.headers[b"Location"].decode().endswith("/p/new.html")
    page = mw.process_request(Request(f"{later}/p/new.html"))
    assert page.body == b"<html>new</html>" and "resumed" in page.flags
    with pytest.raises(IgnoreRequest, match="finished_earlier"):
        mw.process_request(Request(f"{later}/p/timed-out.html"))
    assert mw.process_request(Request(f"{later}/p/open.html")) is None  # unfinished: fetched
    assert mw.process_request(Request(f"{later}/p/never-seen.html")) is None
    assert mw.crawler.stats.values["lookbench/resume/finished_without_response"] == 1


def test_the_archive_index_holds_no_body(tmp_path):
    """A replay or resume reads a record's body when its URL is requested: the index holds places, so memory
    does not grow with the archive (the figures: BENCHMARKS.md, "Replaying and resuming from a WARC")."""
    from lookbench_crawlers.replay import read_archive
    from lookbench_pipeline.warc import read_response_at

    warc = tmp_path / "crawl.warc.gz"
    bodies = {f"http://shop.example/p/{i}.html": bytes([65 + i]) * 300_000 for i in range(5)}
    _archive(warc, [(u, b, []) for u, b in bodies.items()])
    responses, _ = read_archive([warc])
    assert set(responses) == set(bodies)
    for url, (path, offset, date) in responses.items():
        assert isinstance(offset, int) and date
        status, headers, body = read_response_at(path, offset)
        assert status == 200 and body == bodies[url] and ("Content-Type", "text/html") in headers


def test_the_resume_key_keeps_the_host_and_drops_only_a_loopback_port():
    from lookbench_pipeline.crawl import resume_key

    assert resume_key("https://www.shop.example/") != resume_key("https://shop.example/")
    assert resume_key("https://shop.example:8443/p?x=1") != resume_key("https://shop.example/p?x=1")
    assert resume_key("http://127.0.0.1:40001/p.html?a=1#top") == resume_key("http://127.0.0.1:40002/p.html?a=1")
    assert resume_key("http://localhost:1/p") == resume_key("http://LOCALHOST:2/p")
    assert resume_key("http://[::1]:1/p") == resume_key("http://[::1]:2/p")


def test_a_recrawl_that_fails_puts_the_finished_crawl_back(tmp_path):
    """crawl_site(again=True) (lookbench build --force) crawls a finished week again in an empty folder, so every
    image is fetched and archived anew; when that crawl fails (here its server cannot start), the finished crawl
    is put back as it was and is read back by the next build."""
    from contextlib import contextmanager

    from lookbench_pipeline.crawl import CrawlError, crawl_site
    from lookbench_pipeline.demo.serve import local_site

    site = yaml.safe_load(DEMO_SITE.read_text())
    site.update(demo_products=6, demo_looks=1)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    work = tmp_path / "week"
    first = crawl_site(tmp_path / "demo.yaml", work, "test-bot", resume=True, local_server=local_site)
    images = sum(1 for rec, _ in response_records([work / "crawl" / "crawl.warc.gz"])
                 if "/images/" in rec.rec_headers.get_header("WARC-Target-URI"))
    assert images > 0

    @contextmanager
    def broken(_site, _work):
        raise CrawlError("the shop is down")
        yield ""

    try:
        crawl_site(tmp_path / "demo.yaml", work, "test-bot", resume=True, local_server=broken, again=True)
    except CrawlError:
        pass
    else:
        raise AssertionError("the recrawl should have failed")
    back = crawl_site(tmp_path / "demo.yaml", work, "test-bot", resume=True, local_server=local_site)
    assert back.reused and back.crawl_id == first.crawl_id
    assert not (work / "crawl.previous").exists()
    again = crawl_site(tmp_path / "demo.yaml", work, "test-bot", resume=True, local_server=local_site, again=True)
    assert not again.reused and again.crawl_id != first.crawl_id
    assert sum(1 for rec, _ in response_records([work / "crawl" / "crawl.warc.gz"])
               if "/images/" in rec.rec_headers.get_header("WARC-Target-URI")) == images, "every image archived anew"
    assert not (work / "crawl.previous").exists()
