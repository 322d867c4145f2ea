"""What a release's manifest says produced it: the code version, the sources, the annotators and models, the
noise gallery's mining, the AI-generated subsets' generator. Built from the configuration and the stages' tables;
called by the stages (``pipeline.stage_candidate``, ``pipeline.stage_publish``). It sits outside ``releases`` on
purpose: it reads ``aigen``, ``negatives`` and ``vlm``, which read releases, so from inside ``releases`` it would
be an import cycle.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import __version__, crawl
from .config import PipelineConfig
from .images import PHASH_METHOD
from .taxonomy import Taxonomy


def negatives_provenance(cfg: PipelineConfig, negatives: pa.Table, counts: dict[str, Any] | None = None
                         ) -> dict[str, Any]:
    """What the manifest says about the noise gallery: the mining model (id, revision, input size, embedding
    size, weights checksum, as ``embed`` reports it), the thresholds and the counts."""
    nc = cfg.negatives
    has_demo = any(s.kind == "demo" for s in cfg.site_configs())
    usable = [s for s in nc.sources if not (s.demo and not has_demo and not cfg.layout.resolve(s.path).exists())]
    if not usable or (counts is not None and not counts.get("enabled")):
        return {"enabled": False}
    from .embed import resolve_spec

    model = dict((counts or {}).get("model") or {})
    if not model:
        spec = resolve_spec(nc.model)
        model = {"model_id": spec.id, "backend": spec.backend, "input_size": spec.input_size, "dim": spec.dim,
                 "training_cutoff": spec.training_cutoff}
        if negatives.num_rows:
            first = negatives.slice(0, 1).to_pylist()[0]
            model.update(model_id=first["model"], revision=first["model_revision"],
                         input_size=first["model_input_size"], dim=first["model_dim"],
                         weights_sha256=first["model_weights_sha256"])
    kinds = negatives["kind"].to_pylist() if negatives.num_rows else []
    return {"enabled": True, "model": model, "band": list(nc.band), "per_query": nc.per_query,
            "candidates": nc.candidates, "same_category_only": nc.same_category_only, "search_backend": nc.backend,
            "sources": [{"name": s.name, "kind": s.kind} for s in usable],
            "dedup": {"hamming_threshold": cfg.dedup.hamming_threshold, "max_color_diff": cfg.dedup.max_color_diff},
            "pairs": negatives.num_rows, "pairs_by_kind": {k: kinds.count(k) for k in ("soft", "ambiguous", "easy")},
            "distractors": len(set(negatives["distractor_sha256"].to_pylist())) if negatives.num_rows else 0}


def code_version() -> str:
    """The package version and, when run from a git checkout, the commit (``0.1.0+g1a2b3c4``)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+g{sha}" if sha else __version__


def aigen_summary(cfg: PipelineConfig) -> dict[str, Any]:
    """The AI-generated subsets' generator and checks, as the manifest records them (``aigen.manifest_summary``)."""
    from .aigen import manifest_summary

    return manifest_summary(cfg)


def source_entry(site: Any) -> dict[str, Any]:
    """A site as a release's sources list it: name, where (its recorded origin or first start URL), licence."""
    where = site.recorded_origin or (site.start_urls[0] if site.start_urls else None)
    return {"name": site.name, "url": site.source or where, "license": site.license}


def provenance(cfg: PipelineConfig, annotators: list[str]) -> dict[str, Any]:
    """The manifest's provenance: code version, annotators, taxonomy version, dedup method, sites and drops with
    their sources and licences, the AI-generation summary, and an empty ``models`` list the stages extend."""
    tax = Taxonomy.load(cfg.taxonomy)
    return {
        "code_version": code_version(),
        "annotators": sorted(set(annotators)),
        "taxonomy_version": tax.version,
        "dedup": {"method": PHASH_METHOD, "hamming_threshold": cfg.dedup.hamming_threshold},
        "sites": [crawl.SiteConfig.from_yaml(p).name for p in cfg.sites],
        "drops": [d.name for d in cfg.drops],
        "site_sources": [source_entry(crawl.SiteConfig.from_yaml(p)) for p in cfg.sites],
        "drop_sources": [{"name": d.name, "license": d.license, "source": d.source} for d in cfg.drops],
        "aigen": aigen_summary(cfg),
        "models": [],
    }


def annotation_provenance(annotations: pa.Table) -> dict[str, Any]:
    """What produced a release's labels, for its manifest: the annotators, and for image-model labels the models,
    server (vLLM) versions, prompt versions and sampling parameters, the judge models and the judge's acceptance
    rates. Read from the labelled rows of the ``annotations`` table."""
    from . import vlm

    rows = [r for r in annotations.to_pylist() if r["status"] == "labelled"]

    def distinct(col: str) -> list:
        return sorted({r.get(col) for r in rows if r.get(col) is not None})

    out: dict[str, Any] = {"annotators": distinct("annotator"), "labelled_items": len(rows)}
    if any(r.get("model") for r in rows):
        out.update({"models": distinct("model"), "server_versions": distinct("server_version"),
                    "prompt_versions": distinct("prompt_version"),
                    "sampling": [json.loads(s) for s in distinct("sampling")]})
    if any(r.get("judge_model") for r in rows):
        out.update({"judge_models": distinct("judge_model"), "judge_server_versions": distinct("judge_server_version"),
                    "judge_prompt_versions": distinct("judge_prompt_version"),
                    "acceptance": vlm.acceptance_rates(rows)})
    return out


def publish_provenance(cfg: PipelineConfig, annotators: list[str], extra_provenance: dict[str, Any] | None = None
                       ) -> dict[str, Any]:
    """The provenance a publish writes into the manifest: :func:`provenance` with the candidate's sections
    (``extra_provenance``: ``negatives``, ``annotation``, ``aigen``, ``models``) merged in; ``models`` lists every
    model whose output shaped the release (the garment detector, the negatives' mining model)."""
    extra = dict(extra_provenance or {})
    models = list(extra.pop("models", []))  # e.g. the garment detector
    neg = extra.get("negatives") or {}
    if neg.get("model"):  # the manifest names every model whose embeddings shaped the release
        models.append({"role": "negatives_mining", **neg["model"]})
    prov = provenance(cfg, annotators)
    prov["models"] = prov.get("models", []) + models
    return {**prov, **extra}
