"""Memory of the crawl's bounded bookkeeping at its bounds, measured with tracemalloc.

    .venv/bin/python benchmarks/crawl_bounds.py

- The spider's set of 64-bit hashes of the URLs ``max_pages`` cut beyond their rows, filled to
  ``MAX_PAGES_CUT_TRACKED`` (``lookbench_crawlers.spiders.shop``), the way ``ShopSpider._admit`` fills it (the hash
  of each canonical URL).
- The image pipeline's per-page sets of image-URL hashes, ``PAGES_TRACKED`` pages of ``MAX_IMAGES_PER_PAGE`` each
  (``lookbench_crawlers.pipelines``), filled with ``url_hash`` of real-looking image URLs.

Prints the peak traced memory of each, in MB (10^6 bytes).
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "crawlers")]


def _peak(fill) -> float:
    tracemalloc.start()
    kept = fill()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return peak / 1e6


def main() -> None:
    from collections import OrderedDict

    from lookbench_crawlers import pipelines
    from lookbench_crawlers.spiders import shop

    def cut_hashes():
        s = set()
        for i in range(shop.MAX_PAGES_CUT_TRACKED):
            s.add(pipelines.url_hash(f"https://shop.example/products/item-{i:08d}?colour=navy"))
        return s

    def page_sets():
        pages = OrderedDict()
        for p in range(pipelines.PAGES_TRACKED):
            pages[f"https://shop.example/p/{p}"] = {
                pipelines.url_hash(f"https://cdn.shop.example/img/{p}/{i:04d}_1600x.jpg")
                for i in range(pipelines.MAX_IMAGES_PER_PAGE)}
        return pages

    print(f"spider cut-URL hashes, {shop.MAX_PAGES_CUT_TRACKED:,} tracked: peak {_peak(cut_hashes):.1f} MB")
    print(f"image pipeline page sets, {pipelines.PAGES_TRACKED} pages x {pipelines.MAX_IMAGES_PER_PAGE:,} URLs: "
          f"peak {_peak(page_sets):.1f} MB")


if __name__ == "__main__":
    main()
