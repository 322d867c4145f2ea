"""What the assets say in Dagster's event log and materialisations: the level of their messages and the
metadata docs/ARCHITECTURE.md lists."""

import logging

import pyarrow as pa
from dagster import build_asset_context


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_the_image_endpoint_used_is_information_not_a_warning(demo_config, monkeypatch):
    """``generated images: endpoint … model …`` says which server drew the images; a warning would send people
    looking for a problem (the UI marks warnings)."""
    import assets.aigen as aigen
    from assets.resources import LookbenchConfig

    monkeypatch.setattr(aigen, "stage_aigen_generate", lambda *a, **k: (
        pa.table({"request_id": ["r1"]}), {"endpoint": "endpoint http://gpu:9000/v1 model m", "requests": 1}))
    context = build_asset_context(partition_key="2026-07-01")
    seen = _Records()
    context.log.addHandler(seen)
    aigen.generated_images(context=context, lookbench=LookbenchConfig(config_path=str(demo_config)),
                           generation_requests=pa.table({"request_id": ["r1"]}))
    [line] = [r for r in seen.records if "generated images: endpoint http" in r.getMessage()]
    assert line.levelno == logging.INFO
    assert not [r for r in seen.records if r.levelno >= logging.WARNING]


def test_the_contamination_materialisation_carries_its_images_and_rate(demo_config, monkeypatch):
    """docs/ARCHITECTURE.md: the metadata carries the counts and their rates, ``contamination_rate`` among them:
    the new images, the contaminated ones and their ratio, beside the rate per source."""
    import assets.dedup as dedup
    from assets.resources import LookbenchConfig

    found = pa.table({"image_sha256": ["a", "a", "b"], "source": ["deepfashion"] * 3})
    monkeypatch.setattr(dedup, "stage_contamination", lambda *a, **k: (
        pa.table({"source": ["deepfashion"]}), found,
        {"images": 40, "contaminated_images": 2, "index_size": 1, "rate": {"deepfashion": 0.05}}))
    outputs = list(dedup.contamination_check(context=build_asset_context(partition_key="2026-07-01"),
                                             lookbench=LookbenchConfig(config_path=str(demo_config)),
                                             images=pa.table({"image_sha256": ["x"] * 40})))
    [md] = [o.metadata for o in outputs if o.output_name == "contamination"]
    md = {k: getattr(v, "value", v) for k, v in md.items()}
    assert (md["images"], md["contaminated_images"], md["contamination_rate"]) == (40, 2, 0.05)
    assert md["index_size"] == 1 and md["dagster/row_count"] == 3


def test_the_annotations_line_gives_the_rejection_reasons():
    """README: a stage's line gives what was rejected by reason where the stage has them; the annotations line said
    ``rejected 2`` while the table had ``no_category_match`` twice."""
    from assets.attributes import annotations_headline
    from lookbench_pipeline.annotate import label_counts

    rows = [{"status": "labelled", "reason": None, "category": "dress"}] * 10
    rows += [{"status": "rejected", "reason": "no_category_match", "category": None}] * 2
    rows += [{"status": "failed", "reason": "endpoint_error", "category": None}]
    line = annotations_headline({**label_counts(rows), "annotator": "catalog-text/1"})
    assert line == ("items 13: labelled 10, rejected 2 (no_category_match 2), failed 1 (endpoint_error 1) "
                    "(catalog-text/1)"), line
