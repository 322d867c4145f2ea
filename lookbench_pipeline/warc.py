"""Re-running extraction from a crawl's WARC archive alone, without the network: the audit trail of a release.

``extract_from_warc`` reads every HTML ``response`` record (warcio) and applies the same extractors the spider
applies, so a past crawl's products can be rebuilt and checked byte for byte against what it recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from .config import SiteConfig
from .extract import decode_html, extract_look, extract_products


def html_responses(paths: Iterable[Path]) -> Iterable[tuple[str, bytes, str]]:
    """``(url, body, content type)`` of every HTML response record, in file order. A torn last record (a crawl
    killed mid-write) ends the file's iteration without an error."""
    for path in paths:
        with open(path, "rb") as fh:
            try:
                for rec in ArchiveIterator(fh):
                    if rec.rec_type != "response":
                        continue
                    ctype = rec.http_headers.get_header("Content-Type") or ""
                    if "html" not in ctype.lower():
                        continue
                    yield rec.rec_headers.get_header("WARC-Target-URI"), rec.content_stream().read(), ctype
            except Exception:  # warcio raises ArchiveLoadFailed / zlib errors on a torn tail
                continue


def extract_from_warc(paths: Iterable[Path], site: SiteConfig) -> list[dict]:
    """Products and looks found in the archived pages: dicts with ``kind`` (product | look), ``url`` and the
    extracted fields, as the spider yields them (without ``crawled_at``)."""
    out = []
    for url, body, ctype in html_responses(paths):
        text, _ = decode_html(body, ctype)
        for p in extract_products(text, url, site.product_rules):
            out.append({"kind": "product", "site": site.name, "url": url, **p})
        look = extract_look(text, url, site.look_rules)
        if look:
            out.append({"kind": "look", "site": site.name, "url": url, **look})
    return out
