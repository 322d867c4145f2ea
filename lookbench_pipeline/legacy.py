"""Scoring models on legacy benchmarks read from their own formats, so a report can put each model's legacy
score beside its live LookBench score (the gap the LookBench paper is about).

DeepFashion In-shop Clothes Retrieval (Liu et al., CVPR 2016): ``Eval/list_eval_partition.txt`` lists
``image_name item_id evaluation_status`` (after a count line and a header); ``query`` rows are the queries,
``gallery`` rows the gallery, positives share the ``item_id``; the published metric is top-K retrieval accuracy,
our exact-item Recall@K.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .contamination import LegacyFormatError
from .embed import Embedder
from .images import ImageRejected, decode
from .metrics import rank_topk


def read_inshop(root: Path) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """``(queries, gallery)`` as ``(image path, item id)`` from an In-shop tree. Raises LegacyFormatError."""
    part = Path(root) / "Eval" / "list_eval_partition.txt"
    if not part.is_file():
        raise LegacyFormatError(f"{root}: no Eval/list_eval_partition.txt (DeepFashion In-shop layout)")
    queries, gallery = [], []
    for n, line in enumerate(part.read_text(encoding="utf-8").splitlines()[2:], 3):
        f = line.split()
        if len(f) != 3:
            raise LegacyFormatError(f"{part}:{n}: expected 'image_name item_id evaluation_status'")
        if f[2] == "query":
            queries.append((Path(root) / f[0], f[1]))
        elif f[2] == "gallery":
            gallery.append((Path(root) / f[0], f[1]))
    return queries, gallery


def score_inshop(root: Path, embedder: Embedder, ks: tuple[int, ...] = (1, 5, 10, 20),
                 batch: int = 64) -> dict[str, float]:
    """Exact-item Recall@K of ``embedder`` on an In-shop tree. Unreadable images are skipped and counted
    (``unreadable``); queries whose item has no readable gallery image are not scored (``no_positive``)."""
    queries, gallery = read_inshop(root)

    def embed(rows):
        vecs, items, bad = [], [], 0
        for s in range(0, len(rows), batch):
            ims, its = [], []
            for path, item in rows[s : s + batch]:
                try:
                    ims.append(decode(path.read_bytes(), work_side=embedder_input(embedder)).rgb)
                    its.append(item)
                except (ImageRejected, OSError):
                    bad += 1
            if ims:
                vecs.append(embedder.embed(ims))
                items += its
        dim = getattr(embedder, "dim", 1)
        return (np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32)), items, bad

    qv, qi, bad_q = embed(queries)
    gv, gi, bad_g = embed(gallery)
    keep = np.array([i in set(gi) for i in qi], dtype=bool)
    out: dict[str, float] = {"queries": float(keep.sum()), "gallery": float(len(gi)),
                             "unreadable": float(bad_q + bad_g), "no_positive": float((~keep).sum())}
    if keep.sum() == 0 or len(gi) == 0:
        return out
    top = rank_topk(qv[keep] @ gv.T, max(ks))
    hits = np.asarray(gi, dtype=object)[top] == np.asarray(qi, dtype=object)[keep][:, None]
    for k in ks:
        out[f"item_recall@{k}"] = float(hits[:, :k].any(axis=1).mean())
    return out


def embedder_input(embedder: Embedder) -> int:
    """The shorter side the embedder needs (a reduced JPEG decode down to it is enough)."""
    return int(getattr(embedder, "input_size", None) or 224)



def write_demo_inshop(root: Path, n_items: int = 24, seed: int = 11) -> None:
    """A small legacy benchmark in DeepFashion In-shop's format, drawn by the demo shop's garment generator
    (packshots as gallery, alternative shots as queries): the embedded default's legacy score."""
    from . import demo_shop

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
