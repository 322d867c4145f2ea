"""Stage 6, evaluate: every configured retrieval model scored on the published release."""


from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, MetadataValue, Output, asset



from lookbench_pipeline.evaluate import evaluate_legacy, evaluate_release, format_table

from .common import observed
from .partitions import release_partitions
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="evaluate", compute_kind="numpy",
       description="Coarse / Fine Recall@K and nDCG@5 per model, subset and overall (query-count weighted).")
@observed
def evaluation(context: AssetExecutionContext, lookbench: LookbenchConfig, release: dict) -> Output[pa.Table]:
    cfg = lookbench.load()
    scores, skipped = evaluate_release(lookbench.store(), release["version"], cfg.evaluate.models,
                                       Path(cfg.data_dir) / "embeddings", cfg.evaluate.ks, cfg.evaluate.ndcg_k)
    legacy = evaluate_legacy(cfg.evaluate.legacy, cfg.evaluate.models, Path(cfg.data_dir), release["version"])
    scores = pa.concat_tables([scores, legacy])
    table = format_table(scores)
    context.log.info("evaluation of %s:\n%s" % (release["version"], table))
    return Output(scores, metadata={"dagster/row_count": scores.num_rows, "release": release["version"],
                                    "table": MetadataValue.md(f"```\n{table}\n```"),
                                    "skipped_models": MetadataValue.json(skipped)})
