"""Product extraction scored by the Product Extraction Benchmark's own rules, on saved real pages.

    .venv/bin/python benchmarks/extraction_accuracy.py [--pages ../shared/realdata/pages] [--show-errors]
        [--n-bootstrap 1000] [--json out.json]

PEB (github.com/scrapinghub/product-extraction-benchmark, MIT, ``evaluate.py``) scores one predicted value per page
and attribute against a set of accepted values:

- ``price`` matches as a ``Decimal`` (currency is not scored); ``sku`` and ``availability`` match exactly one of the
  listed values; ``availability`` is ``InStock`` or ``OutOfStock``, and an empty prediction is filled with
  ``InStock`` (PEB does this for every system that can return nothing).
- Per page: a right value is a true positive; a wrong value is a false positive AND, when the page has a value, a
  false negative; no value where the page has one is a false negative.
- Precision, recall and F1 over the summed counts; the spread is the standard deviation over ``--n-bootstrap``
  resamples of pages (seed 42, as PEB), and a 95% percentile interval is printed beside it.

Every ``peb_*`` page whose name ends in the first 10 hex digits of a ground-truth key is scored; its URL is the one
the ground truth records (so URL identifiers can be used, as they were by the published systems). The page's
prediction is the extractor's *main* product (``lookbench_pipeline.extract.products.main_product``). Besides the PEB
fields the script reports the share of pages with a product, with a title and with a full-size image (an image URL
whose declared rendition is at least 500 pixels, ``renditions.is_full_size``, or that declares no size at all).

The published figures on PEB's 140 pages (README of the benchmark, 2021) are printed beside ours; ``../shared`` holds
72 of those pages, so ours are on a subset.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from decimal import Decimal, InvalidOperation
from pathlib import Path

from lookbench_pipeline.extract import extract_products, is_full_size, main_product

PUBLISHED = {  # F1 on PEB's 140 pages, from the benchmark's README
    "price": {"Zyte": 0.918, "Diffbot": 0.824, "extruct": 0.685},
    "sku": {"Zyte": 0.841, "Diffbot": 0.765, "extruct": 0.537},
    "availability": {"Zyte": 0.957, "Diffbot": 0.943, "extruct": 0.626},
}
TARGET = {"price": 0.92, "sku": 0.85, "availability": 0.96}


def hard_matching(true: set, pred) -> tuple[int, int, int]:
    """PEB's rule: ``(tp, fp, fn)`` of one prediction against the accepted values."""
    if pred is None:
        return 0, 0, int(bool(true))
    if pred in true:
        return 1, 0, 0
    return 0, 1, int(bool(true))


def decimal_matching(true: set, pred) -> tuple[int, int, int]:
    def dec(x):
        try:
            return Decimal(str(x))
        except InvalidOperation:
            return None
    return hard_matching({dec(x) for x in true}, None if pred is None else dec(pred))


def prf(counts: list[tuple[int, int, int]]) -> dict[str, float]:
    tp, fp, fn = (sum(c[i] for c in counts) for i in range(3))
    precision = 1.0 if fp == fn == 0 else 0.0 if tp == fp == 0 else tp / (tp + fp)
    recall = 1.0 if fp == fn == 0 else 0.0 if tp == fn == 0 else tp / (tp + fn)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"f1": f1, "precision": precision, "recall": recall}


def score(counts: list[tuple[int, int, int]], n_bootstrap: int) -> dict[str, float]:
    m = prf(counts)
    rng = random.Random(42)
    boot: dict[str, list[float]] = {k: [] for k in m}
    n = len(counts)
    for _ in range(n_bootstrap):
        b = prf([counts[rng.randint(0, n - 1)] for _ in range(n)])
        for k, v in b.items():
            boot[k].append(v)
    for k, vs in boot.items():
        vs.sort()
        m[f"{k}_std"] = statistics.stdev(vs) if len(vs) > 1 else 0.0
        m[f"{k}_lo"] = vs[int(0.025 * len(vs))] if vs else m[k]
        m[f"{k}_hi"] = vs[min(len(vs) - 1, int(0.975 * len(vs)))] if vs else m[k]
    return m


def predict(page: Path, url: str) -> dict:
    """The page's main product as PEB fields: price as a decimal string, sku, availability (InStock when empty)."""
    products = extract_products(page.read_bytes(), url)
    p = main_product(products, url) or {}
    price = p.get("price")
    # schema.org values that mean "cannot be bought now" are PEB's OutOfStock; everything else, and nothing, InStock
    availability = "OutOfStock" if p.get("availability") in ("OutOfStock", "SoldOut", "Discontinued") else "InStock"
    return {"price": None if price is None else format(Decimal(repr(price)).normalize(), "f"),
            "sku": p.get("sku"), "availability": availability, "InStock": availability if availability == "InStock"
            else None, "OutOfStock": availability if availability == "OutOfStock" else None,
            "_title": p.get("title"), "_images": p.get("image_urls") or [], "_product": bool(products)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", default=str(Path(__file__).resolve().parents[2] / "shared/realdata/pages"))
    ap.add_argument("--n-bootstrap", type=int, default=1000)
    ap.add_argument("--show-errors", action="store_true")
    ap.add_argument("--json", help="write the metrics as JSON here")
    args = ap.parse_args()
    pages = Path(args.pages)
    gt = json.loads((pages / "peb_ground-truth.json").read_text())
    by_prefix = {k[:10]: v for k, v in gt.items()}
    rules = {"price": decimal_matching, "sku": hard_matching, "availability": hard_matching,
             "InStock": hard_matching, "OutOfStock": hard_matching}
    counts: dict[str, list] = {a: [] for a in rules}
    support = dict.fromkeys(rules, 0)
    errors = []
    n = n_product = n_title = n_full = 0
    for f in sorted(pages.glob("peb_*.html")):
        truth = by_prefix.get(f.stem.rsplit("_", 1)[-1])
        if truth is None:
            continue
        n += 1
        pred = predict(f, truth.get("url") or f"https://example.invalid/{f.name}")
        n_product += pred["_product"]
        n_title += bool(pred["_title"])
        n_full += any(is_full_size(u) for u in pred["_images"])
        for attr, rule in rules.items():
            true = set(truth.get(attr, []))
            support[attr] += bool(true)
            c = rule(true, pred[attr])
            counts[attr].append(c)
            if any(c[1:]) and attr in TARGET:
                errors.append(f"{attr}\t{sorted(true)}\t{pred[attr]!r}\t{f.name}")
    results = {a: {**score(c, args.n_bootstrap), "support": support[a]} for a, c in counts.items()}
    print(f"PEB rules on {n} pages of {pages}\n")
    print("| attribute | F1 | precision | recall | 95% interval of F1 | support | target | Zyte | Diffbot | extruct |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for a, m in results.items():
        pub = PUBLISHED.get(a, {})
        print(f"| {a} | {m['f1']:.3f} ± {m['f1_std']:.3f} | {m['precision']:.3f} | {m['recall']:.3f} | "
              f"{m['f1_lo']:.3f}–{m['f1_hi']:.3f} | {m['support']} | {TARGET.get(a, '')} | "
              f"{pub.get('Zyte', '')} | {pub.get('Diffbot', '')} | {pub.get('extruct', '')} |")
    print(f"\npages: {n}; with a product: {n_product} ({n_product / max(n, 1):.1%}); with a title: {n_title} "
          f"({n_title / max(n, 1):.1%}); with a full-size image: {n_full} ({n_full / max(n, 1):.1%})")
    if args.show_errors:
        print("\nerrors (attribute, accepted, predicted, page):")
        for e in errors:
            print(" ", e)
    if args.json:
        Path(args.json).write_text(json.dumps({"pages": n, "with_product": n_product, "with_title": n_title,
                                               "with_full_size_image": n_full, "metrics": results}, indent=2))


if __name__ == "__main__":
    main()
