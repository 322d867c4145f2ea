"""Stage 6, evaluate: every configured and registry model that can run here, scored on the published release and
on the legacy benchmarks; the leaderboard (Parquet, Markdown) and the HTML report are written to
``<data_dir>/reports/<version>/`` and ``reports/<version>/`` in the object store."""

import pyarrow as pa
from dagster import AssetExecutionContext, MetadataValue, Output, asset

from lookbench_pipeline.evaluate import format_table
from lookbench_pipeline.pipeline import stage_evaluate
from lookbench_pipeline.report import leaderboard_markdown

from .common import observed
from .partitions import release_partitions
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="evaluate", compute_kind="numpy",
       description="Coarse / Fine / exact-item Recall@K and graded nDCG@K (K = 1, 5, 10, 20) per model, subset and "
                   "overall (query-count weighted), with bootstrap intervals; legacy benchmarks beside the live "
                   "scores; leaderboard and HTML report.")
@observed
def evaluation(context: AssetExecutionContext, lookbench: LookbenchConfig, release: dict,
               contamination_index: pa.Table) -> Output[pa.Table]:
    cfg = lookbench.load()
    ev, report = stage_evaluate(cfg, lookbench.store(), release["version"], contamination_index)
    table = format_table(ev.scores)
    context.log.info("evaluation of %s:\n%s\nreport: %s" % (release["version"], table, report["html"]))
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
