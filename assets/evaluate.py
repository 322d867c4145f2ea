"""Stage 6, evaluate: every configured and registry model that can run here, scored on the published release and
on the legacy benchmarks; the leaderboard (Parquet, Markdown) and the HTML report are written to
``<data_dir>/reports/<version>/`` and ``reports/<version>/`` in the object store."""

from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, MetadataValue, Output, asset

from lookbench_pipeline.config import PipelineConfig
from lookbench_pipeline.evaluate import availability, format_table
from lookbench_pipeline.pipeline import stage_evaluate
from lookbench_pipeline.report import leaderboard_markdown
from lookbench_pipeline.store import ObjectStore

from .common import observed, summary
from .partitions import release_partitions
from .resources import LookbenchConfig
from .reuse import reuse_unchanged


HEADLINE = (("item_recall@1", "item"), ("fine_recall@1", "fine"), ("coarse_recall@1", "coarse"))


def evaluation_headline(scores: pa.Table, not_scored: int = 0) -> str:
    """The evaluation on one line: models scored, the subsets scored with their queries, the legacy benchmarks,
    and the best model's overall exact-item / Fine / Coarse Recall@1 (percent; the full table follows in the log
    and the leaderboard)."""
    rows = scores.to_pylist()
    models = sorted({r["model"] for r in rows})
    nq = {r["subset"]: r["n_queries"] for r in rows
          if r["subset"] != "overall" and not r["subset"].startswith("legacy:")}
    legacy = sorted({r["subset"] for r in rows if r["subset"].startswith("legacy:")})
    overall = {(r["model"], r["metric"]): r["value"] for r in rows if r["subset"] == "overall"}
    out = (f"models {len(models)} (not scored here {not_scored}), subsets {len(nq)} ({sum(nq.values())} queries), "
           f"legacy {len(legacy)}")
    scored = [m for m in models if (m, HEADLINE[0][0]) in overall]
    if scored:
        best = max(scored, key=lambda m: overall[(m, HEADLINE[0][0])])
        shown = [(k, label) for k, label in HEADLINE if (best, k) in overall]
        out += (f"; best overall {best}: {'/'.join(label for _, label in shown)} R@1 "
                + "/".join(f"{100 * overall[(best, k)]:.1f}" for k, _ in shown))
    return out


def evaluation_reads(cfg: PipelineConfig) -> list:
    """What the evaluation reads or leaves in place besides its inputs: the legacy benchmarks' folders, the local
    weight caches (a newer snapshot of a model) and the reports folder (a report edited or removed by hand)."""
    from lookbench_pipeline.evaluate import weight_caches

    return [*(src.path for src in cfg.evaluate.legacy), *weight_caches(), cfg.layout.reports]


def models_here(cfg: PipelineConfig) -> dict:
    """Which of the evaluation's models can run on this machine, and why not (weights appearing in the local
    cache change the result)."""
    return availability(cfg.evaluate.models, cfg.evaluate.registry)


def report_in_place(cfg: PipelineConfig, store: ObjectStore, values: dict, metadata: dict) -> str | None:
    """None when the recorded report is in ``data_dir`` and each of its files is in the object store, else which
    is missing (its files' content locally is part of the fingerprint: :func:`evaluation_reads`)."""
    md = metadata.get("evaluation", {})
    html, prefix = (getattr(md.get(k), "value", md.get(k)) for k in ("report", "report_store_prefix"))
    if html is None:
        return "the run that computed it recorded no report"
    folder = Path(str(html)).parent
    if not Path(str(html)).is_file():
        return f"the report {html} is missing"
    for f in sorted(p for p in folder.rglob("*") if p.is_file()) if prefix else []:
        key = f"{prefix}/{f.relative_to(folder).as_posix()}"
        if not store.exists(key):
            return f"the report's {key} is no longer in the object store"
    return None


@asset(partitions_def=release_partitions, group_name="evaluate", compute_kind="numpy",
       description="Coarse / Fine / exact-item Recall@K and graded nDCG@K (K = 1, 5, 10, 20) per model, subset and "
                   "overall (query-count weighted), with bootstrap intervals; legacy benchmarks beside the live "
                   "scores; leaderboard and HTML report.")
@observed
@reuse_unchanged(reads=evaluation_reads, depends=models_here, verify=report_in_place,
                 uses={"release": lambda m: {"version": m["version"], "files": m["files"]}})
def evaluation(context: AssetExecutionContext, lookbench: LookbenchConfig, release: dict,
               contamination_index: pa.Table) -> Output[pa.Table]:
    cfg = lookbench.load()
    ev, report = stage_evaluate(cfg, lookbench.store(), release["version"], contamination_index)
    table = format_table(ev.scores)
    context.log.info(summary(release["version"], evaluation_headline(ev.scores, len(ev.skipped)))
                     + f"\n{table}\nreport: {report['html']}")
    for s in ev.skipped:
        context.log.info("model %s not scored: %s" % (s["model"], s["reason"]))
    return Output(ev.scores, metadata={
        "dagster/row_count": ev.scores.num_rows, "release": release["version"],
        "models_scored": MetadataValue.json([m["model"] for m in ev.models]),
        "skipped_models": MetadataValue.json(ev.skipped),
        "contamination": MetadataValue.json({"release_rejected": ev.counts.get("release_rejected_contamination"),
                                             "excluded_at_evaluation": {s: c["excluded_contamination"]
                                                                        for s, c in ev.counts.items()
                                                                        if isinstance(c, dict)
                                                                        and "excluded_contamination" in c}}),
        "leaderboard": MetadataValue.md(leaderboard_markdown(ev)),
        "report": MetadataValue.path(str(report["html"])),
        "report_store_prefix": report["store_prefix"],
    })
