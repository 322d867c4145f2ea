"""The demo legacy benchmarks: small trees in DeepFashion In-shop's and Fashion200K's formats
(:mod:`lookbench_pipeline.legacy` reads and scores them), drawn by the demo shop's garment generator, so that the
embedded default has a legacy score beside its live one. Config ``evaluate.legacy`` sources with ``demo: true``
name them; the evaluation stage and ``lookbench evaluate`` write the missing ones (:func:`write_demo_trees`)
before scoring. (Moved here from :mod:`lookbench_pipeline.legacy`, whose old names still work for one release.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..legacy import source_path
from . import shop as demo_shop


def write_demo_inshop(root: Path, n_items: int = 24, seed: int = 11) -> None:
    """A small legacy benchmark in DeepFashion In-shop's format, drawn by the demo shop's garment generator
    (packshots as gallery, alternative shots as queries): the embedded default's legacy score."""
    products, _ = demo_shop.plan(n_items, 0, seed)
    rows = []
    for n, p in enumerate(products):
        item = f"id_{n:08d}"
        for view, status, im in (("1_front", "gallery", demo_shop.packshot(p)),
                                 ("2_side", "query", demo_shop.alt_shot(p))):
            rel = f"img/WOMEN/{p.category}/{item}/{view}.jpg"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            im.save(root / rel, quality=90)
            rows.append(f"{rel} {item} {status}")
    (root / "Eval").mkdir(parents=True, exist_ok=True)
    (root / "Eval" / "list_eval_partition.txt").write_text(
        f"{len(rows)}\nimage_name item_id evaluation_status\n" + "\n".join(rows) + "\n", encoding="utf-8")


def write_demo_fashion200k(root: Path, n_items: int = 30, n_single: int = 8, seed: int = 13) -> dict[str, int]:
    """A small legacy benchmark in Fashion200K's format for scoring (the contamination demo tree,
    ``demo_shop.write_fashion200k``, has one image per product and so no positives): garments of the demo shop's
    generator, each product folder holding its alternative shot (``_0``) and packshot (``_1``) in the ``test``
    split; ``n_single`` further products with one image are distractors; a few ``train`` lines show that only the
    test split is scored. Returns ``{"products", "images"}``."""
    products, _ = demo_shop.plan(n_items + n_single + 4, 0, seed)
    products = [p for p in products if p.category in demo_shop.FASHION200K_CATEGORY]
    lines: dict[str, list[str]] = defaultdict(list)
    n_images = 0
    for n, p in enumerate(products):
        pid = 73_000_000 + n
        top, sub = demo_shop.FASHION200K_CATEGORY[p.category]
        split = "train" if n >= n_items + n_single else "test"
        # the alternative shot first (``_0``, the query by the protocol), the packshot second (its positive)
        shots = [demo_shop.alt_shot(p), demo_shop.packshot(p)] if n < n_items or split == "train" else \
            [demo_shop.packshot(p)]
        for v, im in enumerate(shots):
            rel = f"women/{sub}/{sub}_{p.category}/{pid}/{pid}_{v}.jpeg"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            im.save(root / rel, quality=85)
            lines[f"{top}_{split}"].append(f"{rel}\t0.9{n % 10}00\t{p.title.lower()}")
            n_images += 1
    (root / "labels").mkdir(parents=True, exist_ok=True)
    for name, ls in sorted(lines.items()):
        (root / "labels" / f"{name}_detect_all.txt").write_text("\n".join(ls) + "\n", encoding="utf-8")
    return {"products": len(products), "images": n_images}


WRITERS = {"deepfashion_inshop": write_demo_inshop, "fashion200k": write_demo_fashion200k}
"""The legacy kinds that have a demo tree, and the function that writes one."""


def write_demo_trees(sources: Iterable[Any], data_dir: Path | None) -> list[Path]:
    """Write the tree of every ``demo`` source (``LegacySource`` configs) whose path (a relative one under
    ``data_dir``) does not exist yet; the paths written. Raises ValueError for a relative path without
    ``data_dir``, or a demo source of a kind with no demo tree (:data:`WRITERS`)."""
    written = []
    for src in sources:
        path = source_path(src, data_dir)
        if src.demo and not path.exists():
            if src.kind not in WRITERS:
                raise ValueError(f"legacy source {src.name}: no demo tree for kind {src.kind}")
            WRITERS[src.kind](path)
            written.append(path)
    return written
