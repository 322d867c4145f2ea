"""Field accuracy of product extraction on the real saved pages against peb_ground-truth.json.

    .venv/bin/python benchmarks/extraction_accuracy.py [--pages ../shared/realdata/pages]

For every ``peb_*`` page with a ground-truth entry (keyed by the first 10 hex digits of the sha256 in the file
name) and each field (brand, price, currency, sku) the page's ground truth carries, the extracted value of the
page's first product is compared after normalisation: strings case- and space-insensitively, prices as numbers
(``price-parser``), currencies by symbol or ISO code (``€`` = EUR; ``$`` matches any dollar code). Prints a
Markdown table for BENCHMARKS.md and the misses.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from price_parser import Price

from lookbench_pipeline.extract import extract_products

SYMBOLS = {"€": {"EUR"}, "£": {"GBP"}, "$": {"USD", "ARS", "NZD", "AUD", "CAD", "MXN", "SGD", "HKD"},
           "₩": {"KRW"}, "¥": {"JPY", "CNY"}, "zł": {"PLN"}, "kr": {"SEK", "NOK", "DKK"}}


def norm(s: object) -> str:
    return re.sub(r"\s+", " ", str(s or "")).strip().lower()


def same_currency(got: str | None, want: str) -> bool:
    if not got:
        return False
    g, w = got.strip(), want.strip()
    codes_w = SYMBOLS.get(w, {w.upper()})
    codes_g = SYMBOLS.get(g, {g.upper()})
    return bool(codes_w & codes_g)


def same_price(got: float | None, want: str) -> bool:
    if got is None:
        return False
    p = Price.fromstring(want)
    return p.amount is not None and abs(float(p.amount) - got) < 0.005


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", default=str(Path(__file__).resolve().parents[2] / "shared/realdata/pages"))
    args = ap.parse_args()
    pages = Path(args.pages)
    gt = json.loads((pages / "peb_ground-truth.json").read_text())
    by_prefix = {k[:10]: v for k, v in gt.items()}
    fields = ["brand", "price", "currency", "sku"]
    hits = {f: 0 for f in fields}
    totals = {f: 0 for f in fields}
    misses = []
    n_pages = n_with_product = n_with_image = 0
    for f in sorted(pages.glob("peb_*.html")):
        truth = by_prefix.get(f.stem.rsplit("_", 1)[-1])
        if truth is None:
            continue
        n_pages += 1
        products = extract_products(f.read_bytes(), "http://127.0.0.1/" + f.name)
        p = products[0] if products else {}
        n_with_product += bool(products)
        n_with_image += bool(p.get("image_urls"))
        for field in fields:
            if field not in truth:
                continue
            want = truth[field][0]
            totals[field] += 1
            ok = {"price": lambda: same_price(p.get("price"), want),
                  "currency": lambda: same_currency(p.get("currency"), want)}.get(
                field, lambda: norm(p.get(field)) == norm(want))()
            hits[field] += ok
            if not ok:
                misses.append(f"{f.name}: {field} want {want!r} got {p.get(field)!r}")
    print("| field | pages with ground truth | extracted correctly | accuracy |")
    print("|---|---|---|---|")
    for field in fields:
        acc = hits[field] / totals[field] if totals[field] else float("nan")
        print(f"| {field} | {totals[field]} | {hits[field]} | {acc:.1%} |")
    print(f"\npages with ground truth: {n_pages}; with a product extracted: {n_with_product}; "
          f"with at least one image URL: {n_with_image}")
    print("\nmisses:")
    for m in misses:
        print(" -", m)


if __name__ == "__main__":
    main()
