"""Peak memory and time of answering a crawl from its WARC (a ``backfill`` replay, or a resumed crawl's finished
pages): the archive index of ``lookbench_crawlers.replay.read_archive`` (each record's place; its body read when
its URL is requested, ``lookbench_pipeline.warc.read_response_at``) against the peer that holds every body in a
dict (what ``read_archive`` did before 2026-12-06), both serving every page once, in archive order.

    .venv/bin/python benchmarks/replay_memory.py [--pages 10000] [--pages-dir ../shared/realdata/pages]

Input (written once, not timed): a gzipped WARC written by the crawl's own archive middleware
(``lookbench_crawlers.warc.WarcArchiveMiddleware``), ``--pages`` response records whose bodies cycle through the
real saved HTML pages of ``--pages-dir`` (the page mix a crawl archives: sizes as saved, 4 KB to 3 MB), each under
its own URL. Each variant runs in a fresh process started by a parent that never read the archive (a child's
``ru_maxrss`` starts at its parent's peak on Linux): its peak resident set (MB) and wall time, and the sha256 of
the bodies it served, so the two are checked to serve the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "crawlers")]


def write_archive(pages_dir: Path, n: int, warc: Path) -> int:
    from scrapy.http import HtmlResponse, Request

    from lookbench_crawlers.warc import WarcArchiveMiddleware

    bodies = [p.read_bytes() for p in sorted(pages_dir.glob("*.htm*"))]
    if not bodies:
        raise SystemExit(f"no saved pages (*.html) in {pages_dir}")
    mw = WarcArchiveMiddleware(str(warc), attempt="1")
    total = 0
    for i in range(n):
        body = bodies[i % len(bodies)]
        url = f"https://shop.example/p/{i}.html"
        req = Request(url)
        mw.process_response(req, HtmlResponse(url, body=body, headers={"Content-Type": "text/html"}, request=req))
        total += len(body)
    return total


def child(variant: str, warc: str) -> None:
    t0 = time.perf_counter()
    digest = hashlib.sha256()
    if variant == "index":
        from lookbench_crawlers.replay import read_archive
        from lookbench_pipeline.warc import read_response_at

        responses, _ = read_archive([warc])
        for url, (path, offset, _date) in responses.items():
            digest.update(read_response_at(path, offset)[2])
    else:  # the peer: every body in memory, as the archive was read before
        from lookbench_pipeline.warc import response_records

        held = {rec.rec_headers.get_header("WARC-Target-URI"): body for rec, body in response_records([warc])}
        for body in held.values():
            digest.update(body)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"variant": variant, "peak_mb": round(peak), "wall_s": round(wall, 1),
                      "sha256": digest.hexdigest()[:16]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--pages-dir", type=Path, default=ROOT.parent / "shared/realdata/pages")
    ap.add_argument("--child", choices=("index", "held"))
    ap.add_argument("--warc")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.warc)
    with tempfile.TemporaryDirectory() as tmp:
        warc = Path(tmp) / "crawl.warc.gz"
        raw = write_archive(a.pages_dir, a.pages, warc)
        print(f"{a.pages} records, bodies {raw / 1e6:.0f} MB, WARC {warc.stat().st_size / 1e6:.0f} MB (gzip); "
              f"load average {os.getloadavg()[0]:.2f}")
        for variant in ("index", "held"):
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--warc", str(warc)],
                                 capture_output=True, text=True, check=True)
            print(out.stdout.strip())


if __name__ == "__main__":
    main()
