"""Stage 4, attributes: category and attribute labels for every product and drop item."""


import pyarrow as pa
from dagster import (AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetExecutionContext, AssetIn,
                     MetadataValue, Output, asset)

from lookbench_pipeline.pipeline import stage_attributes
from lookbench_pipeline.vlm import acceptance_check

from .common import observed, reasons, summary, table_metadata
from .partitions import by_window, release_partitions
from .resources import LookbenchConfig


def annotations_headline(c: dict) -> str:
    """The labels' counts: items = labelled + rejected + failed, the rejected and failed ones by reason
    (``annotate.label_counts``: ``rejected.<reason>``, ``failed.<reason>``), and the annotator."""
    g = c.get
    return (f"items {g('items', 0)}: labelled {g('labelled', 0)}, rejected {g('rejected', 0)}"
            f"{reasons(c, 'rejected.')}, failed {g('failed', 0)}{reasons(c, 'failed.')} ({g('annotator')})")


@asset(partitions_def=release_partitions, group_name="attributes", compute_kind="python", pool="vllm",
       ins={"products": AssetIn(partition_mapping=by_window), "drop_items": AssetIn(), "image_refs": AssetIn()},
       check_specs=[AssetCheckSpec(
           "judge_acceptance_rate", asset="annotations", blocking=True,
           description="The judge accepted at least annotate.min_acceptance of the image model's attribute labels "
                       "(passes when no judge ran: catalogue-text labels).")],
       description="Category and attributes per item, with the annotator that produced them: the catalogue-text "
                   "annotator, or an image model behind an OpenAI-compatible endpoint (annotate.endpoint) verified "
                   "by a judge. In the 'vllm' concurrency pool so that two runs do not overload one server.")
@observed
def annotations(context: AssetExecutionContext, lookbench: LookbenchConfig, products: pa.Table,
                drop_items: pa.Table, image_refs: pa.Table):
    cfg = lookbench.load()
    table, counts = stage_attributes(cfg, products, drop_items, image_refs, lookbench.store())
    context.log.info(summary("annotations", annotations_headline(counts),
                             {k: v for k, v in counts.items() if not isinstance(v, dict)}))
    yield Output(table, metadata=table_metadata(table, counts, ["item_id", "status", "reason", "category",
                                                                "annotator"]))
    passed, details = acceptance_check(counts.get("acceptance"), cfg.annotate.min_acceptance)
    yield AssetCheckResult(check_name="judge_acceptance_rate", passed=passed, severity=AssetCheckSeverity.ERROR,
                           metadata={k: MetadataValue.json(v) if isinstance(v, dict) else v
                                     for k, v in details.items()})
