"""Scoring models on legacy benchmarks read from their own formats, so a report can put each model's legacy
score beside its live LookBench score (the gap the LookBench paper is about).

* DeepFashion In-shop Clothes Retrieval (Liu et al., CVPR 2016): ``Eval/list_eval_partition.txt`` lists
  ``image_name item_id evaluation_status`` (after a count line and a header); ``query`` rows are the queries,
  ``gallery`` rows the gallery, positives share the ``item_id``. The published metric is top-K retrieval
  accuracy, our exact-item Recall@K.
* Fashion200K (Han et al., ICCV 2017): ``labels/<category>_<split>_detect_all.txt``, one image per line,
  tab-separated ``path, detection score, description``; the product id is the folder above the image
  (``women/<category>/<subcategory>/<product id>/<product id>_<n>.jpeg``). Fashion200K publishes no
  image-to-image protocol (its benchmark is text-guided retrieval), so ours is stated here and in
  docs/METRICS.md: the ``test`` split only; each product with at least two images gives one query (its first
  image in path order) and every other test image is the gallery; positives share the product id; products with
  one image are distractors.

The small demo trees in these formats (``write_demo_inshop``, ``write_demo_fashion200k``) are drawn by the demo shop
and live in :mod:`lookbench_pipeline.demo.legacy`; their old names here still work for one release (a
DeprecationWarning), resolved when first used, so this module imports nothing of the demo.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .contamination import LegacyFormatError
from .contamination import _fashion200k as _fashion200k_images  # one parser of the format
from .embed import Embedder, EmbeddingCache
from .embed.packs import load_rgb
from .images import ImageRejected
from .layout import DataLayout
from .metrics import topk_from_embeddings

KINDS = ("deepfashion_inshop", "fashion200k")


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


def read_fashion200k(root: Path, split: str = "test") -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """``(queries, gallery)`` as ``(image path, product id)`` from a Fashion200K tree, by the protocol in the
    module docstring. Raises LegacyFormatError (no ``labels/*_<split>_detect_all.txt``, a malformed line, or a
    path without a product folder)."""
    by_item: dict[str, list[Path]] = defaultdict(list)
    for im in _fashion200k_images(Path(root), split):
        if im.item_id is None:
            raise LegacyFormatError(f"{root}: {im.rel}: no product folder in the path "
                                    "(women/<category>/<subcategory>/<product id>/<file>)")
        by_item[im.item_id].append(im.path)
    queries, gallery = [], []
    for item in sorted(by_item):
        paths = sorted(by_item[item])
        if len(paths) >= 2:
            queries.append((paths[0], item))
            gallery += [(p, item) for p in paths[1:]]
        else:
            gallery.append((paths[0], item))
    return queries, gallery


def read_legacy(kind: str, root: Path) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """``(queries, gallery)`` of a legacy benchmark of ``kind`` (:data:`KINDS`). Raises LegacyFormatError, or
    ValueError for a kind that has no retrieval protocol here."""
    if kind == "deepfashion_inshop":
        return read_inshop(root)
    if kind == "fashion200k":
        return read_fashion200k(root)
    raise ValueError(f"legacy scoring supports {', '.join(KINDS)}, not {kind!r}")


def source_path(src: Any, data_dir: Path | None) -> Path:
    """The path of a legacy source (a ``LegacySource`` config): a relative one is under ``data_dir``. Raises
    ValueError for a relative path without ``data_dir``."""
    path = Path(src.path)
    if not path.is_absolute():
        if data_dir is None:
            raise ValueError(f"legacy source {src.name}: relative path {path} needs data_dir")
        path = DataLayout(Path(data_dir)).resolve(path)
    return path


def score_legacy(kind: str, root: Path, embedder: Embedder, ks: Sequence[int] = (1, 5, 10, 20),
                 cache: EmbeddingCache | None = None, batch: int = 64, progress: Any = None) -> dict[str, Any]:
    """Exact-item Recall@K of ``embedder`` on a legacy benchmark read from its own format.

    Unreadable images (missing, or rejected by the safe decode) are skipped and counted (``unreadable``);
    queries whose item has no readable gallery image are not scored (``no_positive``).

    Returns:
        ``{"queries": n scored, "gallery", "unreadable", "no_positive"`` (ints), ``"per_query":
        {"item_recall@K": (n,) float64 in {0,1}}}``.
    """
    queries, gallery = read_legacy(kind, root)
    if cache is None:  # no cache given: a temporary one (removed with ``tmp`` when this function returns)
        import tempfile

        tmp = tempfile.TemporaryDirectory()
        cache = EmbeddingCache(Path(tmp.name), embedder.info())

    def embed(rows):
        """Vectors of readable images (cached by the sha256 of the file's bytes) and the readable mask."""
        out = np.zeros((len(rows), cache.dim), dtype=np.float32)
        ok = np.ones(len(rows), dtype=bool)
        for s in range(0, len(rows), batch * 16):
            part = rows[s : s + batch * 16]
            data: list[bytes | None] = []
            for path, _ in part:
                try:
                    data.append(path.read_bytes())
                except OSError:
                    data.append(None)
            shas = [hashlib.sha256(d).hexdigest() if d is not None else "" for d in data]
            vecs, missing = cache.get(shas)
            images, todo = [], []
            for i in missing:
                try:
                    if data[i] is None:
                        raise OSError(f"{part[i][0]}: cannot be read")
                    images.append(load_rgb(data[i], embedder))
                    todo.append(i)
                except (ImageRejected, OSError):
                    ok[s + i] = False
            for b in range(0, len(todo), batch):
                idx = todo[b : b + batch]
                new = embedder.embed(images[b : b + batch])
                vecs[idx] = new
                cache.put([shas[i] for i in idx], new)
            out[s : s + len(part)] = vecs
            if progress is not None:
                progress.update(len(part))
        return out, ok

    qv, q_ok = embed(queries)
    gv, g_ok = embed(gallery)
    qi = [item for (_, item), ok in zip(queries, q_ok) if ok]
    gi = [item for (_, item), ok in zip(gallery, g_ok) if ok]
    qv, gv = qv[q_ok], gv[g_ok]
    items = set(gi)
    keep = np.array([i in items for i in qi], dtype=bool)
    out: dict[str, Any] = {"queries": int(keep.sum()), "gallery": len(gi),
                           "unreadable": int((~q_ok).sum() + (~g_ok).sum()), "no_positive": int((~keep).sum()),
                           "per_query": {}}
    if keep.sum() == 0:
        return out
    top, _ = topk_from_embeddings(qv[keep], gv, max(ks))
    hits = np.asarray(gi, dtype=object)[top] == np.asarray(qi, dtype=object)[keep][:, None]
    for k in ks:
        out["per_query"][f"item_recall@{k}"] = hits[:, :k].any(axis=1).astype(float)
    return out


def score_inshop(root: Path, embedder: Embedder, ks: tuple[int, ...] = (1, 5, 10, 20),
                 batch: int = 64) -> dict[str, float]:
    """Exact-item Recall@K of ``embedder`` on an In-shop tree, as means, with the counts of
    :func:`score_legacy` (``queries``, ``gallery``, ``unreadable``, ``no_positive``) as floats."""
    res = score_legacy("deepfashion_inshop", root, embedder, ks, batch=batch)
    out = {k: float(res[k]) for k in ("queries", "gallery", "unreadable", "no_positive")}
    out.update({m: float(v.mean()) for m, v in res["per_query"].items()})
    return out


_MOVED_TO_DEMO = ("write_demo_inshop", "write_demo_fashion200k")


def __getattr__(name: str) -> Any:
    """The demo writers' old names (one release): a DeprecationWarning, then the function from
    :mod:`lookbench_pipeline.demo.legacy`. Imported by name at first use (``importlib``), so that this production
    module has no import of the demo (pyproject.toml's import rules)."""
    if name not in _MOVED_TO_DEMO:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(f"{__name__}.{name} moved to lookbench_pipeline.demo.legacy; import it from there",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module("lookbench_pipeline.demo.legacy"), name)
