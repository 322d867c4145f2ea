"""The evaluation run: :func:`run_evaluation` scores models on every subset of a published release and overall
(query-count weighted), on the queries that count (a cutoff, contamination re-checked), with the noise gallery added
to every subset's gallery, and on legacy benchmarks, in named steps (load the models, score each model on each
subset, the overall rows, the paired tests, the legacy rows); and the entry points (:func:`evaluate_configured`,
:func:`evaluate_release`, :func:`evaluate_legacy`). It builds on the package's other modules, which import none of
it (the package docstring says what is scored; formulas: docs/METRICS.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .. import schemas
from ..embed import EmbedderUnavailable, EmbeddingCache, load_embedder
from ..layout import DataLayout
from ..metrics import LabelCodes, bootstrap_ci_many, weighted_overall
from ..releases.reader import (NOISE, SUBSETS, check_same_images, choose_subsets, folder_gaps, manifest_subsets,
                               read_manifest_with_digest, read_pulled, release_prefix)
from ..store import LocalStore, ObjectStore
from .availability import ModelEntry, did_you_mean_model, registry_entries, unavailable_reason
from .files import ReleaseFile, _load_verified, _row_labels, _save_verified, _vectors, label_codes
from .results import Evaluation, _model_columns, _paired_tests
from .subset import _after, _fine, _noise_hits_top, _thumb, contamination_flags, score_subset

log = logging.getLogger(__name__)

DEFAULT_KS = (1, 5, 10, 20)


# ---------------------------------------------------------------------------------------------------------------
# The run, step by step


_Embedders = dict[str, tuple[Any, EmbeddingCache | None, date | None]]
"""Per model name: the embedder (or precomputed vectors), its embedding cache (None for precomputed vectors) and
its cutoff (None: every query)."""


@dataclass
class _Run:
    """What one :func:`run_evaluation` call builds up: the :class:`Evaluation`, the score rows, and per model its
    per-query values (per metric, one array per subset), the queries it scored per subset and their ids pooled
    over subsets (for the overall rows and the paired tests)."""

    ev: Evaluation
    embedders: _Embedders
    ks: list[int]
    seed: int
    progress: bool
    ndcg_ks: list[int] = field(default_factory=list)  # the K of nDCG@K (empty: those of ks)
    rows: list[dict] = field(default_factory=list)
    per_query: dict[str, dict[str, list[np.ndarray]]] = field(default_factory=dict)
    per_subset_n: dict[str, dict[str, int]] = field(default_factory=dict)
    pooled_ids: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.per_query = {m: {} for m in self.embedders}
        self.per_subset_n = {m: {} for m in self.embedders}
        self.pooled_ids = {m: [] for m in self.embedders}


@dataclass
class _Subset:
    """One subset as it is scored: the query file, the gallery parts (its own gallery, then the noise gallery when
    the release has one) and their label columns, which queries are clean (not flagged as contamination), their
    label codes, and the queries sampled for the report's examples."""

    name: str
    q: ReleaseFile
    g_parts: list[ReleaseFile]
    g_meta: pa.Table
    clean: np.ndarray
    codes_all: LabelCodes
    q_items: list
    g_items: list
    q_ids: list
    g_ids: list
    sample: np.ndarray

    @property
    def n_own(self) -> int:
        """The subset's own gallery size: gallery columns ``n_own:`` are the noise gallery."""
        return self.g_parts[0].num_rows

    def g_bytes(self, j: int) -> bytes:
        return self.g_parts[0].image_bytes(j) if j < self.n_own else self.g_parts[1].image_bytes(j - self.n_own)


def _progress(progress: bool, **kw):
    from tqdm.auto import tqdm

    return tqdm(disable=not progress, leave=False, dynamic_ncols=True, **kw)


def _resolve_legacy_path(src: Any, data_dir: Path | None) -> Path:
    """A legacy source's path (relative ones under ``data_dir``). A ``demo`` source's tree must be there: the demo
    writes it (:func:`lookbench_pipeline.demo.legacy.write_demo_trees`, called by the evaluation stage and by
    ``lookbench evaluate``). Raises ValueError."""
    from ..legacy import source_path

    path = source_path(src, data_dir)
    if src.demo and not path.exists():
        raise ValueError(f"legacy source {src.name}: the demo tree {path} is not there (the demo writes it: "
                         "lookbench_pipeline.demo.legacy.write_demo_trees)")
    return path


def _checked(ks: Sequence[int], cutoff: date | str | None) -> tuple[list[int], date | str | None]:
    """``(ks, cutoff)``: K values checked (:func:`lookbench_pipeline.config.sections.check_ks`, the rule of
    ``evaluate.ks``: integers >= 1, each once) and sorted, a cutoff string parsed (``"model"`` kept). Raises
    ValueError."""
    from ..config.sections import check_ks, parse_day

    try:
        ks = sorted(check_ks(ks))
    except ValueError as exc:
        raise ValueError(f"ks: {exc}") from None
    if isinstance(cutoff, str) and cutoff != "model":
        try:
            cutoff = parse_day(cutoff)
        except ValueError as exc:
            raise ValueError(f"cutoff must be a date YYYY-MM-DD or 'model', got {cutoff!r}") from exc
    return ks, cutoff


def _load_models(ev: Evaluation, wanted: list[str], entries: dict[str, ModelEntry], cutoff: date | str | None,
                 overrides: dict[str, date], cache_dir: Path, cuda: bool | None,
                 embedders_given: Mapping[str, Any] | None) -> _Embedders:
    """Load every wanted model that can run here, and take the given ones; the others go to ``ev.skipped`` with
    the reason, the loaded ones to ``ev.models``."""
    embedders: _Embedders = {}
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
            # the model's own training cutoff (``--training-cutoff``, ``training_cutoff=``) was given for this run:
            # it wins over the configuration's ``model_cutoffs``, and a different one there is said
            own = date.fromisoformat(str(declared)) if declared else None
            m_cut, src = own or overrides.get(mid), "model"
            if own and overrides.get(mid) not in (None, own):
                ev.notes.append(f"{mid}: scored from its own training cutoff {own.isoformat()}, not from "
                                f"evaluate.model_cutoffs' {overrides[mid].isoformat()}")
        else:
            m_cut, src = cutoff, ("global" if cutoff else None)
        cache = None if hasattr(emb, "vectors_for") else EmbeddingCache(Path(cache_dir) / "given", emb.info())
        embedders[mid] = (emb, cache, m_cut)
        ev.models.append({"model": mid, "info": emb.info(), "cutoff": m_cut.isoformat() if m_cut else None,
                          "cutoff_source": src if m_cut else None})
    return embedders


def _clean_queries(ev: Evaluation, subset: str, q: ReleaseFile, n_own: int, noise: ReleaseFile | None,
                   contamination_index: pa.Table | None, contamination_match: tuple[float, ...]) -> np.ndarray:
    """Bool mask of the queries not flagged as contamination (re-checked against ``contamination_index``); the
    subset's counts go to ``ev.counts``."""
    flags = (contamination_flags(q.table_for_contamination(), contamination_index, *contamination_match)
             if contamination_index is not None and q.num_rows else {})
    q_shas = q.column("image_sha256")
    clean = np.array([s not in flags for s in q_shas], dtype=bool)
    ev.counts[subset] = {"queries_in_release": q.num_rows, "excluded_contamination": int((~clean).sum()),
                         "excluded_by_source": _count(flags[s] for s in q_shas if s in flags),
                         "gallery": n_own, "noise": noise.num_rows if noise else 0}
    return clean


def _score_model_on_subset(run: _Run, part: _Subset, mid: str, emb: Any, cache: EmbeddingCache | None,
                           m_cut: date | None, has_noise: bool) -> None:
    """Embed a subset's files with one model, score its queries (those clean and first seen on or after the
    model's cutoff), add the rows and per-query values to ``run``, and the report's examples; a model left with no
    query goes to ``ev.unscored`` with the reason."""
    ev, q, ks, progress = run.ev, part.q, run.ks, run.progress
    with _progress(progress, total=q.num_rows + part.g_meta.num_rows, desc=f"embedding {mid} {part.name}",
                   unit="img") as bar:
        qv = _vectors(emb, cache, q, bar)
        parts = [_vectors(emb, cache, f, bar) for f in part.g_parts]
        gv = parts[0] if len(parts) == 1 else np.concatenate(parts)  # no copy without a noise part
        del parts
    keep = np.nonzero(part.clean & _after(q.meta, m_cut))[0]
    if len(keep) == 0:
        seen = q.column("first_seen_at") if q.num_rows else []
        latest = max((t for t in seen if t is not None), default=None)
        reason = (f"no query to score: {q.num_rows} in the release, {int((~part.clean).sum())} flagged as "
                  "contamination")
        if m_cut is not None:
            reason += (f", none of the others first seen on or after the cutoff {m_cut.isoformat()} (the "
                       f"latest query was first seen {latest.date().isoformat() if latest else 'never'})")
        ev.unscored.append({"model": mid, "subset": part.name, "reason": reason})
        return
    ca = part.codes_all
    codes = LabelCodes.from_codes(ca.qc[keep], ca.qa[keep], ca.gc, ca.ga, ca.n_values)
    with _progress(progress, total=len(keep), desc=f"scoring {mid} {part.name}", unit="query") as bar:
        res, top, top_scores = score_subset(qv[keep], gv, codes, ks, [part.q_items[i] for i in keep], part.g_items,
                                            progress=bar, ndcg_ks=run.ndcg_ks or ks)
    if has_noise:  # the noise gallery's columns are n_own: in gv
        res.update(_noise_hits_top(top[:, 0], codes, part.n_own))
    metrics = list(res)
    mat = np.stack([res[m] for m in metrics], axis=1)
    lo, hi = bootstrap_ci_many(mat, seed=run.seed)
    for j, m in enumerate(metrics):
        run.rows.append({"release": ev.release, "model": mid, "subset": part.name, "metric": m,
                         "value": float(mat[:, j].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                         "n_queries": len(keep), "cutoff": m_cut.isoformat() if m_cut else None,
                         **_model_columns(emb.info())})
        run.per_query[mid].setdefault(m, []).append(mat[:, j])
    run.per_subset_n[mid][part.name] = len(keep)
    run.pooled_ids[mid].append(np.array([f"{part.name}/{part.q_ids[i]}" for i in keep], dtype=object))
    _add_examples(ev, part, mid, keep, top, top_scores)


def _add_examples(ev: Evaluation, part: _Subset, mid: str, keep: np.ndarray, top: np.ndarray,
                  top_scores: np.ndarray) -> None:
    """For each sampled query that was scored: the model's top-5 with hit/miss (``ev.examples``) and the
    thumbnails they show (``ev.thumbs``)."""
    q, subset, q_items, g_items, q_ids, g_ids = part.q, part.name, part.q_items, part.g_items, part.q_ids, part.g_ids
    pos = {int(i): n for n, i in enumerate(keep)}
    for i in part.sample:
        if int(i) not in pos:
            continue
        r = pos[int(i)]
        qc_i, qa_i = _row_labels(q.meta, int(i))
        results = []
        for rank, (j, s) in enumerate(zip(top[r, :5].tolist(), top_scores[r, :5].tolist()), 1):
            key = f"{subset}/gallery/{g_ids[j]}"
            if key not in ev.thumbs:
                ev.thumbs[key] = _thumb(part.g_bytes(j))
            gc_j, ga_j = _row_labels(part.g_meta, j)
            same_cat = gc_j == qc_i
            results.append({"rank": rank, "thumb": key, "item_ID": g_items[j], "category": gc_j,
                            "score": round(float(s), 4), "item_hit": g_items[j] == q_items[i],
                            "coarse_hit": same_cat, "fine_hit": same_cat and _fine(qa_i, ga_j),
                            "noise": j >= part.n_own})
        key = f"{subset}/query/{q_ids[i]}"
        if key not in ev.thumbs:
            ev.thumbs[key] = _thumb(q.image_bytes(int(i)))
        ev.examples.append({"subset": subset, "model": mid, "query": key, "sample_id": q_ids[i],
                            "item_ID": q_items[i], "category": qc_i, "attributes": qa_i,
                            "results": results})


def _add_overall_rows(run: _Run) -> None:
    """Each model's ``overall`` rows: the query-count weighted mean over subsets, with a bootstrap interval over
    the pooled queries."""
    embedders, per_query, per_subset_n = run.embedders, run.per_query, run.per_subset_n
    for mid in embedders:
        if not per_subset_n[mid]:
            continue
        metrics = list(per_query[mid])
        mat = np.stack([np.concatenate(per_query[mid][m]) for m in metrics], axis=1)
        lo, hi = bootstrap_ci_many(mat, seed=run.seed)  # query-count weighting = the mean over the pooled queries
        m_cut = embedders[mid][2]
        for j, m in enumerate(metrics):
            by_subset = {s: (float(np.mean(v)), len(v)) for s, v in zip(per_subset_n[mid], per_query[mid][m])}
            run.rows.append({"release": run.ev.release, "model": mid, "subset": "overall", "metric": m,
                             "value": weighted_overall(by_subset), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                             "n_queries": int(sum(per_subset_n[mid].values())),
                             "cutoff": m_cut.isoformat() if m_cut else None,
                             **_model_columns(embedders[mid][0].info())})


def _add_legacy_rows(run: _Run, src: Any, data_dir: Path | None) -> None:
    """Every model's rows on one legacy benchmark (``subset = "legacy:<name>"``) and its counts."""
    path = _resolve_legacy_path(src, data_dir)
    from ..legacy import score_legacy

    for mid, (emb, cache, _) in run.embedders.items():
        with _progress(run.progress, desc=f"legacy {src.name} {mid}", unit="img") as bar:
            res = score_legacy(src.kind, path, emb, run.ks, cache, progress=bar)
        run.ev.legacy_counts[src.name] = {k: res[k] for k in ("queries", "gallery", "unreadable", "no_positive")}
        if not res["per_query"]:
            continue
        metrics = list(res["per_query"])
        mat = np.stack([res["per_query"][m] for m in metrics], axis=1)
        lo, hi = bootstrap_ci_many(mat, seed=run.seed)
        for j, m in enumerate(metrics):
            run.rows.append({"release": run.ev.release, "model": mid, "subset": f"legacy:{src.name}", "metric": m,
                             "value": float(mat[:, j].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                             "n_queries": res["queries"], "cutoff": None, **_model_columns(emb.info())})


def _pulled_subsets(store: ObjectStore, version: str, manifest: dict, subsets: list[str], asked: bool,
                    warn: list[str]) -> list[str]:
    """On a pulled release folder (``lookbench pull --subset`` brings some subsets): the ``subsets`` that were
    pulled, by pull's own rule (``releases.reader.folder_gaps``). A file the pull brought that is gone (the
    distractor gallery ``noise/``, one of a pulled subset's files) is damage: ``FileNotFoundError`` naming the files.
    Subsets not pulled are left out with a warning (appended to ``warn``) when none were asked for;
    ``FileNotFoundError`` names the command that pulls an asked-for one. Other stores hold every file the manifest
    names: ``subsets`` unchanged."""
    from ..store import ReleaseFolder

    if not isinstance(store, ReleaseFolder):
        return subsets
    prefix = release_prefix(version)
    # the data files and the card (which names the subsets a partial pull brought); the other metadata files are not
    # scored (info names those missing)
    keys = [*manifest["files"], *(["README.md"] if "README.md" in manifest.get("metadata_files", {}) else [])]
    present = {k for k in keys if store.exists(f"{prefix}/{k}")}
    card = store.get_bytes(f"{prefix}/README.md") if "README.md" in present else None
    not_pulled, gone = folder_gaps(manifest, present, card, read_pulled(store.root))  # pull's record first
    gone = [k for k in gone if k.split("/")[0] in {*subsets, NOISE} and k in manifest["files"]]
    if gone:
        raise FileNotFoundError(f"{store.url} lacks {', '.join(gone)} of {version}, which a pull brings (noise/ "
                                "always, every subset's gallery includes it; a subset's query and gallery together): "
                                f"the folder is damaged; `lookbench pull {version} --store STORE --dest DIR` with the "
                                "same --subset options again restores it")
    present_subsets = [s for s in subsets if s not in not_pulled]
    missing = [s for s in subsets if s in not_pulled]
    if missing and (asked or not present_subsets):
        raise FileNotFoundError(f"{store.url} lacks {', '.join(missing)} of {version}: `lookbench pull {version} "
                                + "".join(f"--subset {s} " for s in missing)
                                + "--store STORE --dest DIR` (the store it was pulled from) brings "
                                + ("them" if len(missing) > 1 else "it"))
    if missing:
        msg = f"{version}: scoring the pulled subsets {', '.join(present_subsets)}; not pulled: {', '.join(missing)}"
        log.info("%s", msg)
        warn.append(msg)
    return present_subsets


def run_evaluation(store: ObjectStore, version: str, model_ids: Iterable[str] = (), cache_dir: Path | None = None,
                   ks: Sequence[int] = DEFAULT_KS, cutoff: date | str | None = None, registry: bool = False,
                   legacy: Sequence[Any] = (), data_dir: Path | None = None,
                   contamination_index: pa.Table | None = None, contamination_match: tuple[float, ...] = (6, 32.0),
                   model_cutoffs: Mapping[str, str] | None = None,
                   n_examples: int = 6, seed: int = 0, progress: bool = False, cuda: bool | None = None,
                   embedders_given: Mapping[str, Any] | None = None, subsets: Sequence[str] | None = None,
                   ndcg_ks: Sequence[int] | None = None) -> Evaluation:
    """Score models on every subset of a published release (and on legacy benchmarks).

    Args:
        model_ids: models to score (always tried; skipped with the reason when they cannot run).
        embedders_given: more models, ready to use, by the name their scores carry: an object with ``vectors_for(file,
            progress)`` (:class:`PrecomputedEmbeddings`, :class:`FunctionEmbedder`) or an embedder with
            ``embed(images)`` and ``info()``. Their declared ``info()["training_cutoff"]`` serves ``cutoff="model"``.
        subsets: score only these subsets (default: every subset of the release); ValueError for one the
            release does not have (with the closest name).
        cache_dir: embedding cache root (lookbench_pipeline.embed.cache, .packs); None embeds without caching (in a
            temporary folder, removed before this returns).
        ks: the K of Recall@K and nDCG@K (integers >= 1, each once: ValueError otherwise; a K larger than a
            subset's gallery is scored, with a note in ``ev.notes``: Recall@K is then 1 for every query with a
            positive).
        ndcg_ks: the K of nDCG@K when they differ from ``ks`` (None: ``ks``).
        cutoff: a date: only queries first seen on or after it (00:00 UTC) are scored (the gallery is kept whole);
            ``"model"``: each model's declared training cutoff (``model_cutoffs`` or the registry; a model with
            none is scored on every query; a given model's own ``info()["training_cutoff"]`` wins over
            ``model_cutoffs``, with a note when they differ); None: every query.
        registry: also every model of :func:`registry_entries` (those that cannot run here are skipped).
        legacy: ``LegacySource`` configs (kinds ``deepfashion_inshop``, ``fashion200k``); relative paths are under
            ``data_dir``; a ``demo`` source's tree must exist (the demo writes it:
            :func:`lookbench_pipeline.demo.legacy.write_demo_trees`).
        contamination_index: the contamination index (``contamination_index`` table); queries that match one of
            its legacy benchmarks are excluded and counted (``excluded_contamination``); ``contamination_match``
            is ``(Hamming threshold in bits, max colour difference)``, the dedup settings.
        n_examples: queries sampled per subset (seeded, the same for every model) for the report's pictures.
        progress: show tqdm progress bars (embedding per image, scoring per subset).
        cuda: override CUDA detection (tests).
    Returns:
        An :class:`Evaluation`.
    Raises:
        StoreError: the version is not published. ValueError: a bad cutoff or legacy source (a missing demo tree).
        FileNotFoundError: a pulled release folder lacks an asked-for subset or the distractor gallery (on such a
            folder, subsets that were not pulled are otherwise left out, with a warning).
    """
    if cache_dir is None:  # no cache asked for: a temporary one, removed when this function returns
        import tempfile

        with tempfile.TemporaryDirectory(prefix="lookbench-embeddings-") as tmp:
            return run_evaluation(store, version, model_ids, Path(tmp), ks, cutoff, registry=registry, legacy=legacy,
                                  data_dir=data_dir, contamination_index=contamination_index,
                                  contamination_match=contamination_match, model_cutoffs=model_cutoffs,
                                  n_examples=n_examples, seed=seed, progress=progress, cuda=cuda,
                                  embedders_given=embedders_given, subsets=subsets, ndcg_ks=ndcg_ks)
    ks, cutoff = _checked(ks, cutoff)
    n_ks = _checked(ndcg_ks, None)[0] if ndcg_ks else ks
    manifest, manifest_sha256 = read_manifest_with_digest(store, version)
    listed = manifest_subsets(manifest)
    have = [s for s in SUBSETS if s in listed]
    asked = bool(subsets)
    unknown = [s for s in listed if s not in SUBSETS]
    named_unknown = [s for s in subsets or [] if s in unknown]
    if named_unknown:
        raise ValueError(f"{version}: this version of lookbench_pipeline does not know the subset "
                         f"{', '.join(named_unknown)} (it knows {', '.join(SUBSETS)}); a newer version may score it")
    warn: list[str] = []
    if unknown and not asked:
        warn.append(f"{version}: not scored, subsets this version of lookbench_pipeline does not know: "
                    f"{', '.join(unknown)}")
        log.info("%s", warn[-1])
    subsets = choose_subsets(have, list(subsets), version) if subsets else have
    subsets = _pulled_subsets(store, version, manifest, subsets, asked, warn)
    if not subsets:  # so that an empty result says why
        warn.append(f"{version}: no subset to score: its manifest lists "
                    + (f"only {', '.join(listed)}" if listed else "no subset's query and gallery files"))
    entries = {e.model_id: e for e in registry_entries()}
    wanted = list(dict.fromkeys([*model_ids, *(entries if registry else [])]))
    overrides = {k: date.fromisoformat(v) for k, v in (model_cutoffs or {}).items()}

    ev = Evaluation(release=version, ks=ks, scores=schemas.empty(schemas.SCORES),
                    cutoff=cutoff.isoformat() if isinstance(cutoff, date) else cutoff, notes=[], warnings=warn,
                    manifest_sha256=manifest_sha256)
    embedders = _load_models(ev, wanted, entries, cutoff, overrides, cache_dir, cuda, embedders_given)

    rejected = manifest.get("counts", {}).get("rejected_by_reason", {}) or {}
    ev.counts["release_rejected_contamination"] = {k.split(":", 1)[1]: v for k, v in rejected.items()
                                                   if k.startswith("contamination:")}
    run = _Run(ev, embedders, ks, seed, progress, n_ks)
    rng = np.random.default_rng(seed)
    verified = _load_verified(cache_dir, ev.warnings)
    noise = (ReleaseFile(store, version, manifest, NOISE, "gallery", verified)
             if f"{NOISE}/gallery.parquet" in manifest["files"] else None)
    if noise is not None and noise.num_rows == 0:
        ev.warnings.append(f"{version}: the noise gallery ({NOISE}/gallery.parquet) has no rows: the galleries have "
                           "no distractors, and the distractor@K scores are left out")
        log.info("%s", ev.warnings[-1])
        noise = None
    images_seen: dict[str, tuple[str, str]] = {}  # sample_id -> (image_sha256, file): one image in every file
    if noise is not None:
        check_same_images(images_seen, noise.meta, noise.name)

    def _open(subset: str) -> tuple[ReleaseFile, ReleaseFile]:
        q, g = (ReleaseFile(store, version, manifest, subset, role, verified) for role in ("query", "gallery"))
        for f in (q, g):
            check_same_images(images_seen, f.meta, f.name)
        _save_verified(cache_dir, verified)
        return q, g

    # a folder's files (a pulled release) are read in place, their label columns only: every subset's files are
    # checked (sha256, schema, ids) before the first model embeds anything; a remote store's are fetched whole, one
    # subset at a time
    opened = {s: _open(s) for s in subsets} if isinstance(store, LocalStore) else {}
    for subset in subsets:
        q, g = opened.pop(subset, None) or _open(subset)
        g_parts = [g, *([noise] if noise else [])]
        g_meta = pa.concat_tables([f.meta.cast(g_parts[0].meta.schema) for f in g_parts])
        clean = _clean_queries(ev, subset, q, g_parts[0].num_rows, noise, contamination_index, contamination_match)
        if g_meta.num_rows == 0 or not embedders:
            continue
        _note_ks_beyond(ev, subset, sorted({*ks, *n_ks}), g_parts[0].num_rows, noise.num_rows if noise else 0)
        common = clean & _after(q.meta, cutoff if isinstance(cutoff, date) else None)
        pool = np.nonzero(common)[0]
        sample = np.sort(rng.choice(pool, size=min(n_examples, len(pool)), replace=False)) if len(pool) else pool
        part = _Subset(subset, q, g_parts, g_meta, clean, label_codes(q.meta, g_meta), q.column("item_ID"),
                       g_meta.column("item_ID").to_pylist(), q.column("sample_id"),
                       g_meta.column("sample_id").to_pylist(), sample)
        for mid, (emb, cache, m_cut) in embedders.items():
            _score_model_on_subset(run, part, mid, emb, cache, m_cut, noise is not None)

    _add_overall_rows(run)
    ev.paired = _paired_tests(run.rows, run.per_query, run.pooled_ids, seed)
    for src in legacy:
        _add_legacy_rows(run, src, data_dir)
    ev.scores = schemas.from_rows(run.rows, schemas.SCORES)
    return ev


def _note_ks_beyond(ev: Evaluation, subset: str, ks: Sequence[int], n_own: int, n_noise: int) -> None:
    """A note in ``ev.notes`` for the K larger than a subset's gallery (its own and the noise gallery): they are
    scored, and the note says what they then mean."""
    n_g = n_own + n_noise
    big = [k for k in ks if k > n_g]
    if big:
        ev.notes.append(f"{subset}: K {', '.join(map(str, big))} > its gallery of {n_g} images"
                        + (f" ({n_own} + {n_noise} distractors)" if n_noise else "")
                        + f": scored over the whole gallery, the same as @{n_g} (Recall@K is 1 for every query with a "
                        "positive in the gallery)")


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def evaluate_configured(settings: Any, store: ObjectStore, version: str, *, data_dir: Path | None = None,
                        cache_dir: Path | None = None, contamination_index: pa.Table | None = None,
                        contamination_match: tuple[float, ...] = (6, 32.0), model_ids: Sequence[str] | None = None,
                        cutoff: str | None = None, registry: bool | None = None, legacy: bool = True,
                        progress: bool = False, embedders_given: Mapping[str, Any] | None = None,
                        subsets: Sequence[str] | None = None) -> Evaluation:
    """:func:`run_evaluation` with the settings of an ``evaluate`` configuration section (``settings``, a
    :class:`lookbench_pipeline.config.EvaluateConfig`): its models (unless ``model_ids``), registry, legacy
    benchmarks (unless ``legacy`` is False), K values (nDCG also at ``ndcg_k`` when set), cutoff (unless ``cutoff``),
    per-model cutoffs, whether to re-check contamination, and report examples."""
    ndcg_k = getattr(settings, "ndcg_k", None)
    return run_evaluation(
        store, version, list(model_ids) if model_ids is not None else settings.models, cache_dir,
        list(settings.ks), cutoff if cutoff is not None else settings.cutoff,
        registry=settings.registry if registry is None else registry, legacy=settings.legacy if legacy else (),
        data_dir=data_dir, contamination_index=contamination_index if settings.exclude_contaminated else None,
        contamination_match=contamination_match, model_cutoffs=settings.model_cutoffs,
        n_examples=settings.report_examples, progress=progress, embedders_given=embedders_given, subsets=subsets,
        ndcg_ks=sorted({*settings.ks, ndcg_k}) if ndcg_k else None)


def evaluate_release(store: ObjectStore, version: str, model_ids: list[str], cache_dir: Path,
                     ks: list[int] | None = None, ndcg_k: int = 5, cutoff: date | None = None,
                     ) -> tuple[pa.Table, list[dict]]:
    """Score each model on every subset of a published release: ``(scores, skipped)`` (see
    :func:`run_evaluation`; Recall@K at every K of ``ks``, nDCG@K there and at ``ndcg_k``)."""
    ks = list(ks or DEFAULT_KS)
    ev = run_evaluation(store, version, model_ids, cache_dir, ks, cutoff, n_examples=0,
                        ndcg_ks=sorted({*ks, ndcg_k}))
    return ev.scores, ev.skipped


def evaluate_legacy(sources: list, model_ids: list[str], data_dir: Path, release: str,
                    ks: Sequence[int] = DEFAULT_KS, cache_dir: Path | None = None) -> pa.Table:
    """Each model's exact-item Recall@K on each legacy benchmark (``subset = "legacy:<name>"``, with bootstrap
    intervals), for the report to show beside the live scores. Demo sources are generated under ``data_dir`` if
    missing. Models that cannot run here are left out (``run_evaluation`` lists them as skipped)."""
    from ..legacy import score_legacy

    cache_dir = Path(cache_dir) if cache_dir is not None else DataLayout(Path(data_dir)).embeddings
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
