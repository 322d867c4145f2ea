"""Soft-negative mining: distractors from Fashion200K that look like a query item but are not it.

For every item that can be a query in the release window (a labelled product or drop item with accepted images),
the images of the Fashion200K pool (read in its own format or its Parquet copy through
:func:`lookbench_pipeline.contamination.iter_source`) are ranked by cosine similarity to the item's images with a
retrieval model (:mod:`lookbench_pipeline.embed`), by exact top-k search (:mod:`lookbench_pipeline.search`):

1. a pool image scoring above ``band[1]`` (near-duplicate level) is never a distractor of that item, and one
   below ``band[0]`` is not close enough: the similarity of a distractor lies in ``[band[0], band[1]]``; an
   item's similarity to a pool image is the maximum over the item's images;
2. a pool image of the same product (same item id) is never a distractor, and each pool product gives an item at
   most one distractor (its closest image);
3. the ``per_query`` closest remaining pool images (ties: lower pool index first) are the item's distractors.

Every pair records the category and attribute agreement between the item and the distractor, with the pool's
labels mapped to our taxonomy (:func:`label_pool_item`): ``soft`` (same category, at least one attribute both
carry differs), ``ambiguous`` (same category, no carried attribute differs: the labels cannot tell them apart)
or ``easy`` (another category). docs/METRICS.md defines them.

The selected distractors become the release's ``noise`` gallery, deduplicated against everything else: a pool
image whose bytes equal an image of the window (sha256), or whose pHash is within the dedup Hamming threshold of
one (colour-confirmed, as in :mod:`lookbench_pipeline.dedup`), is dropped, and near duplicates among the
distractors keep one representative. Counts reconcile: ``pool.in = pool.embedded + pool.rejected``,
``selected = kept + dropped``.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa

from . import schemas
from .annotate import CatalogTextAnnotator
from .config import ImageConfig, LegacySource
from .contamination import SourceImage, iter_source
from .dedup import cluster, confirmed_by_colour, hex_to_u64, near_pairs_mih
from .embed import Embedder, EmbeddingCache
from .images import ImageRef, ImageRejected, Reject, decode, take_in
# noise_rows moved to the release build (its only user); importable from here for one release
from .releases.build import noise_rows  # noqa: F401
from .search import topk
from .store import ObjectStore, original_key
from .taxonomy import Taxonomy

log = logging.getLogger(__name__)

ANNOTATOR_POOL = "fashion200k-text/1"
"""Labels of pool images: Fashion200K's category (label file / folder / Parquet ``category1..3``) refined by the
catalogue-text annotator on its description (:func:`label_pool_item`)."""

POOL_KINDS = ("fashion200k", "fashion200k_parquet")

FASHION200K_CATEGORY = {"dress": "dress", "dresses": "dress", "jacket": "outerwear", "jackets": "outerwear",
                        "pants": "trousers", "skirt": "skirt", "skirts": "skirt", "top": "top", "tops": "top"}
"""Fashion200K's five top-level categories (label file names and the ``women/<category>`` folders) -> ours."""

REFINES = {"dress": {"dress"}, "outerwear": {"outerwear"}, "trousers": {"trousers", "shorts"}, "skirt": {"skirt"},
           "top": {"top", "shirt", "sweater"}}
"""Finer categories of ours that a description may name within a Fashion200K category ("top" -> a "blouse" is
our ``shirt``); a description naming anything else does not override the source's category."""

KINDS = ("soft", "ambiguous", "easy")


@dataclass
class PoolLabel:
    category: str | None
    attributes: dict[str, str]
    reason: str | None = None  # why there is no category


def label_pool_item(annotator: CatalogTextAnnotator, description: str | None,
                    categories: Iterable[str]) -> PoolLabel:
    """Our category and attributes for a Fashion200K image from its description and the source's categories
    (most general first). The source's top-level category decides; a description naming a finer category of
    ours inside it (``REFINES``) refines it. Attributes are matched in the description, then the category texts
    (a "mini skirts" subcategory gives ``length: mini``). No category -> ``reason = no_category_match``."""
    cats = [c for c in categories if c]
    base = None
    for c in cats:
        for word in c.lower().replace("-", " ").split():
            if word in FASHION200K_CATEGORY:
                base = FASHION200K_CATEGORY[word]
                break
        if base:
            break
    fine = annotator.category_of(description, *reversed(cats))
    if base is None:
        category = fine
    else:
        category = fine if fine in REFINES.get(base, {base}) else base
    if category is None:
        return PoolLabel(None, {}, "no_category_match")
    cat_text = " ".join(cats)
    attrs = {}
    for attr in annotator.tax.categories[category].attributes:
        v = annotator.value_of(category, attr, description, cat_text)
        if v is not None:
            attrs[attr] = v
    return PoolLabel(category, attrs)


def agreement(q_cat: str, q_attrs: dict[str, str], d_cat: str, d_attrs: dict[str, str],
              not_visible: str = "not visible") -> tuple[bool, int, int, str]:
    """``(same_category, shared, agreeing, kind)`` for an item and a distractor: ``shared`` = attributes both
    carry (not absent, not "not visible"), ``agreeing`` = those with equal values; ``kind`` is ``easy`` (other
    category), ``soft`` (same category, ``agreeing < shared``) or ``ambiguous`` (same category, no difference)."""
    same = q_cat == d_cat
    keys = [a for a in q_attrs if a in d_attrs and q_attrs[a] != not_visible and d_attrs[a] != not_visible]
    agree = sum(q_attrs[a] == d_attrs[a] for a in keys)
    kind = "easy" if not same else ("soft" if agree < len(keys) else "ambiguous")
    return same, len(keys), agree, kind


@dataclass
class QueryItem:
    """An item that can be a query: its id, labels and accepted images (sha256, in the store)."""

    item_id: str
    category: str
    attributes: dict[str, str]
    shas: list[str]


@dataclass
class MiningConfig:
    band: tuple[float, float] = (0.5, 0.95)
    per_query: int = 5
    candidates: int = 50  # pool images searched per item image before the band and product filters
    same_category_only: bool = False
    backend: str = "numpy"
    hamming_threshold: int = 6
    max_color_diff: float = 32.0
    # Distractor dedup errs toward "duplicate": a look-alike dropped costs one distractor, a recoloured copy of a
    # query's picture kept as its negative is a false negative. So no foreground-colour check here by default
    # (the release's own dedup uses dedup.max_foreground_delta_e); cut-outs are joined as everywhere.
    max_foreground_delta_e: float = math.inf
    max_pool: int | None = None
    chunk: int = 512  # pool images read and embedded per step (bounds the bytes held in memory)

    def __post_init__(self) -> None:
        lo, hi = self.band
        if not (-1.0 <= lo < hi <= 1.0):
            raise ValueError(f"band must satisfy -1 <= low < high <= 1, got {list(self.band)}")
        if self.per_query < 1 or self.candidates < self.per_query:
            raise ValueError(f"need 1 <= per_query <= candidates, got {self.per_query}, {self.candidates}")


@dataclass
class MiningResult:
    negatives: pa.Table  # schemas.NEGATIVES
    counts: dict[str, Any] = field(default_factory=dict)


def _bump(counts: dict[str, Any], key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def query_items(products: pa.Table, drop_items: pa.Table, image_refs: pa.Table, annotations: pa.Table,
                window) -> list[QueryItem]:
    """Labelled products and drop items first seen inside ``window``, with their accepted images (sha256, in
    position order, each once), sorted by item id."""
    ann = {r["item_id"]: r for r in annotations.to_pylist() if r["status"] == "labelled"}
    images: dict[str, list[str]] = {}
    owner_item = {d["drop_image_id"]: d["item_id"] for d in drop_items.to_pylist()}
    in_window = {p["product_id"] for p in products.to_pylist() if p["first_seen_at"] in window}
    in_window |= {d["item_id"] for d in drop_items.to_pylist() if d["first_seen_at"] in window}
    for r in sorted(image_refs.to_pylist(), key=lambda r: (r["owner_id"], r["position"])):
        if r["status"] != "accepted" or r["owner_type"] not in ("product", "drop"):
            continue
        item = r["owner_id"] if r["owner_type"] == "product" else owner_item.get(r["owner_id"])
        if item is None:
            continue
        lst = images.setdefault(item, [])
        if r["image_sha256"] not in lst:
            lst.append(r["image_sha256"])
    out = []
    for item, shas in sorted(images.items()):
        a = ann.get(item)
        if a is None or item not in in_window or not a["category"]:
            continue
        out.append(QueryItem(item, a["category"], {x["name"]: x["value"] for x in a["attributes"]}, shas))
    return out


def _decoded(data: bytes, side: int, cfg: ImageConfig):
    return decode(data, cfg, work_side=side).rgb


def mine(items: list[QueryItem], sources: list[LegacySource], window_images: pa.Table, store: ObjectStore,
         embedder: Embedder, cache: EmbeddingCache, taxonomy: Taxonomy, mcfg: MiningConfig,
         image_cfg: ImageConfig | None = None, now: datetime | None = None,
         progress: Callable[[str], None] | None = None) -> MiningResult:
    """Mine distractors for ``items`` from the pool ``sources`` (see the module docstring).

    Args:
        window_images: the window's ``images`` table: the noise gallery is deduplicated against it.
        store: where the items' originals are read from, and the kept distractors' originals are written to.
        cache: the embedding cache of ``embedder``.
    Returns:
        the ``negatives`` table (one row per (item, distractor), sorted by item then rank) and its counts.
    Raises:
        ValueError: a source is not a Fashion200K kind.
        LegacyFormatError: a source's layout is wrong.
    """
    image_cfg = image_cfg or ImageConfig()
    say = progress or (lambda msg: log.info(msg))
    info = embedder.info()
    side = int(getattr(embedder, "input_size", None) or 224)
    ann = CatalogTextAnnotator(taxonomy)
    counts: dict[str, Any] = {"query_items": len(items), "pool.in": 0, "pool.embedded": 0, "pool.rejected": 0}
    window_sha = set(window_images.column("image_sha256").to_pylist()) if window_images.num_rows else set()

    # --- the pool: read, label, hash, embed (streamed in chunks; only vectors and labels are kept)
    pool: list[dict] = []
    vecs: list[np.ndarray] = []
    seen_sha: set[str] = set()
    for src in sources:
        if src.kind not in POOL_KINDS:
            raise ValueError(f"negatives source {src.name!r}: kind {src.kind!r} is not one of {POOL_KINDS}")
        buf: list[tuple[dict, bytes]] = []

        def flush() -> None:
            if not buf:
                return
            decoded: dict[int, Any] = {}
            for i, (p, data) in enumerate(buf):
                if p["sha256"] in cache:
                    continue  # embedded before: not even decoded again
                try:
                    decoded[i] = _decoded(data, side, image_cfg)
                except ImageRejected as exc:
                    decoded[i] = exc
            ok = [i for i in range(len(buf)) if not isinstance(decoded.get(i), ImageRejected)]
            for i in range(len(buf)):
                if isinstance(decoded.get(i), ImageRejected):
                    _bump(counts, f"pool.rejected.{decoded[i].reason}")
                    counts["pool.rejected"] += 1
            v = cache.embed(embedder, [buf[i][0]["sha256"] for i in ok], lambda j: decoded[ok[j]])
            for j, i in enumerate(ok):
                pool.append(buf[i][0])
                vecs.append(v[j])
            counts["pool.embedded"] += len(ok)
            buf.clear()

        for im in iter_source(src.kind, src.path):
            if mcfg.max_pool is not None and counts["pool.in"] >= mcfg.max_pool:
                break
            counts["pool.in"] += 1
            reason, data, rec = _pool_record(src, im, ann, window_sha, seen_sha)
            if reason:
                _bump(counts, f"pool.rejected.{reason}")
                counts["pool.rejected"] += 1
                continue
            buf.append((rec, data))
            if len(buf) >= mcfg.chunk:
                flush()
        flush()
    assert counts["pool.in"] == counts["pool.embedded"] + counts["pool.rejected"]
    say(f"negatives: pool of {len(pool)} images embedded ({counts['pool.rejected']} rejected)")
    empty = MiningResult(schemas.empty(schemas.NEGATIVES), counts)
    if not pool or not items:
        counts.update(selected=0, kept=0, pairs=0)
        return empty
    P = np.stack(vecs).astype(np.float32)

    # --- the items' images, embedded through the same cache
    q_shas = [s for it in items for s in it.shas]
    q_start = np.cumsum([0] + [len(it.shas) for it in items])  # item n's images are rows q_start[n]:q_start[n+1]
    Q = cache.embed(embedder, q_shas, lambda i: _decoded(store.get_bytes(original_key(q_shas[i])), side, image_cfg))
    counts["mining_queries"] = len(q_shas)

    # --- search: the best `candidates` pool images at or below the band's top, per item image
    lo, hi = mcfg.band
    res = topk(Q, P, mcfg.candidates, max_score=hi, backend=mcfg.backend)
    pairs: list[dict] = []
    for n, it in enumerate(items):
        best: dict[int, float] = {}
        for r in range(q_start[n], q_start[n + 1]):
            for s, j in zip(res.scores[r], res.indices[r]):
                if j < 0 or s < lo:
                    continue
                if s > best.get(int(j), -np.inf):
                    best[int(j)] = float(s)
        chosen: list[tuple[float, int]] = []
        products: set[str] = set()
        for j, s in sorted(best.items(), key=lambda kv: (-kv[1], kv[0])):
            p = pool[j]
            if p["item_id"] == it.item_id or p["raw_item_id"] == it.item_id:
                _bump(counts, "excluded.same_product")
                continue
            if p["item_id"] in products:
                continue
            if mcfg.same_category_only and p["category"] != it.category:
                continue
            products.add(p["item_id"])
            chosen.append((s, j))
            if len(chosen) == mcfg.per_query:
                break
        for rank, (s, j) in enumerate(chosen, 1):
            pairs.append({"item": n, "pool": j, "similarity": s, "rank": rank})
    selected = sorted({p["pool"] for p in pairs})
    counts["selected"] = len(selected)
    say(f"negatives: {len(pairs)} pairs, {len(selected)} distinct distractors selected")

    # --- take the selected distractors in (stored, decoded, pHashed) and deduplicate them against the window
    wanted = {pool[j]["key"]: j for j in selected}
    data = _reread(sources, wanted, mcfg.max_pool)
    refs = [ImageRef("distractor", key, 0, key, f"legacy:{pool[j]['source']}", now or datetime.now(timezone.utc))
            for key, j in sorted(wanted.items())]
    intake = take_in(refs, lambda key: _fetch(data, key), store, image_cfg)
    kept_rows = {r["image_sha256"]: r for r in intake.images}
    dropped: dict[int, str] = {}
    for ref in intake.refs:
        if ref["status"] != "accepted":
            dropped[wanted[ref["source"]]] = f"intake.{ref['reason']}"
    cand = [kept_rows[pool[j]["sha256"]] for j in selected if j not in dropped and pool[j]["sha256"] in kept_rows]
    near = _near_window(cand, window_images, mcfg.hamming_threshold, mcfg.max_color_diff, mcfg.max_foreground_delta_e)
    by_sha = {pool[j]["sha256"]: j for j in selected}
    for sha in near:
        dropped[by_sha[sha]] = "near_duplicate_of_window_image"
    rest = [r for r in cand if r["image_sha256"] not in near]
    for c in cluster(rest, mcfg.hamming_threshold, mcfg.max_color_diff, mcfg.max_foreground_delta_e):
        if not c["is_representative"]:
            dropped[by_sha[c["image_sha256"]]] = "near_duplicate_in_noise"
    for reason in dropped.values():
        _bump(counts, f"dropped.{reason}")
    counts["dropped"] = len(dropped)
    counts["kept"] = counts["selected"] - counts["dropped"]

    # --- the table
    out = []
    meta = {"model": info["model_id"], "model_revision": info.get("revision"),
            "model_input_size": info.get("input_size"), "model_dim": info.get("dim"),
            "model_weights_sha256": info.get("weights_sha256")}
    by_item: dict[int, list[dict]] = {}
    for p in pairs:
        if p["pool"] not in dropped:
            by_item.setdefault(p["item"], []).append(p)
    for n, it in enumerate(items):
        for rank, p in enumerate(sorted(by_item.get(n, []), key=lambda p: p["rank"]), 1):
            d = pool[p["pool"]]
            img = kept_rows[d["sha256"]]
            same, shared, agree, kind = agreement(it.category, it.attributes, d["category"], d["attributes"],
                                                  taxonomy.not_visible)
            out.append({
                "query_item_id": it.item_id, "query_category": it.category,
                "distractor_sha256": d["sha256"], "distractor_item_id": d["item_id"],
                "distractor_source": d["source"], "distractor_path": d["rel"],
                "distractor_category": d["category"],
                "distractor_attributes": [{"name": k, "value": v} for k, v in sorted(d["attributes"].items())],
                "distractor_annotator": ANNOTATOR_POOL, "width": img["width"], "height": img["height"],
                "similarity": p["similarity"], "rank": rank, "same_category": same, "shared_attributes": shared,
                "agreeing_attributes": agree, "kind": kind, **meta,
            })
    counts["pairs"] = len(out)
    counts["pairs_by_kind"] = {k: sum(r["kind"] == k for r in out) for k in KINDS}
    counts["items_with_distractors"] = len({r["query_item_id"] for r in out})
    counts["distractors"] = len({r["distractor_sha256"] for r in out})
    return MiningResult(schemas.from_rows(out, schemas.NEGATIVES), counts)


def _pool_record(src: LegacySource, im: SourceImage, ann: CatalogTextAnnotator, window_sha: set[str],
                 seen_sha: set[str]) -> tuple[str | None, bytes, dict]:
    """``(rejection reason or None, bytes, record)`` for one pool image."""
    label = label_pool_item(ann, im.description, im.categories)
    if label.category is None:
        return label.reason, b"", {}
    try:
        data = im.read_bytes()
    except FileNotFoundError:
        return Reject.NOT_FOUND, b"", {}
    except OSError:  # no permission, an I/O error: the file is there but cannot be read
        return Reject.UNREADABLE, b"", {}
    if not data:
        return "empty_file", b"", {}
    sha = hashlib.sha256(data).hexdigest()
    if sha in window_sha:
        return "exact_duplicate_of_window_image", b"", {}
    if sha in seen_sha:
        return "duplicate_in_pool", b"", {}
    seen_sha.add(sha)
    raw = im.item_id or im.rel
    return None, data, {"source": src.name, "rel": im.rel, "key": f"{src.name}:{im.rel}", "sha256": sha,
                        "raw_item_id": raw, "item_id": f"{src.name}:{raw}", "category": label.category,
                        "attributes": label.attributes}


def _reread(sources: list[LegacySource], wanted: dict[str, int], max_pool: int | None) -> dict[str, bytes]:
    """The bytes of the wanted pool images (keys ``<source>:<rel>``), read again from their sources."""
    out: dict[str, bytes] = {}
    n = 0
    for src in sources:
        for im in iter_source(src.kind, src.path):
            if max_pool is not None and n >= max_pool:
                return out
            n += 1
            key = f"{src.name}:{im.rel}"
            if key in wanted:
                try:
                    out[key] = im.read_bytes()
                except OSError:
                    pass
    return out


def _fetch(data: dict[str, bytes], key: str) -> bytes:
    if key not in data:
        raise ImageRejected(Reject.NOT_FOUND, key)
    return data[key]


def _near_window(cand: list[dict], window_images: pa.Table, threshold: int, max_color_diff: float,
                 max_foreground_delta_e: float = math.inf) -> set[str]:
    """sha256s of candidate images (rows like ``images``) within ``threshold`` pHash bits of a window image,
    colour-confirmed; images flagged ``uniform`` match nothing (all blank images share a hash)."""
    old = [r for r in window_images.to_pylist() if "uniform" not in (r.get("flags") or [])]
    new = [r for r in cand if "uniform" not in (r.get("flags") or [])]
    if not old or not new:
        return set()
    u_new, inv_new = np.unique(hex_to_u64([r["phash"] for r in new]), return_inverse=True)
    u_old, inv_old = np.unique(hex_to_u64([r["phash"] for r in old]), return_inverse=True)
    members_new: list[list[int]] = [[] for _ in u_new]
    members_old: list[list[int]] = [[] for _ in u_old]
    for k, u in enumerate(inv_new.tolist()):
        members_new[u].append(k)
    for j, u in enumerate(inv_old.tolist()):
        members_old[u].append(j)
    n_u = len(u_new)
    out = set()
    pairs = near_pairs_mih(np.concatenate([u_new, u_old]), threshold)
    for a, b, _ in pairs:
        if a < n_u <= b:
            for k in members_new[a]:
                if any(confirmed_by_colour(new[k], old[j], max_color_diff, max_foreground_delta_e)
                       for j in members_old[b - n_u]):
                    out.add(new[k]["image_sha256"])
    return out

