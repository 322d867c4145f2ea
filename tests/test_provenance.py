"""What a release's manifest says produced it (lookbench_pipeline.provenance)."""

import re

import pyarrow as pa

from lookbench_pipeline import schemas
from lookbench_pipeline.config import load_config
from lookbench_pipeline.provenance import annotation_provenance, code_version, provenance, publish_provenance


def test_the_demo_provenance_names_its_sources_taxonomy_and_code():
    cfg = load_config(None)
    prov = provenance(cfg, ["catalog-text/1", "catalog-text/1"])
    assert prov["annotators"] == ["catalog-text/1"] and prov["sites"] == ["demo"] and prov["models"] == []
    assert prov["site_sources"][0]["license"].startswith("Apache-2.0")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", code_version()) and prov["code_version"] == code_version()


def test_publish_provenance_lists_every_model_that_shaped_the_release():
    cfg = load_config(None)
    detector = {"role": "detector", "model_id": "yolo"}
    neg = {"enabled": True, "model": {"model_id": "baseline/hsv-hog-v1"}}
    prov = publish_provenance(cfg, ["a"], {"models": [detector], "negatives": neg, "annotation": {"x": 1}})
    assert prov["models"] == [detector, {"role": "negatives_mining", "model_id": "baseline/hsv-hog-v1"}]
    assert prov["negatives"] == neg and prov["annotation"] == {"x": 1}


def test_annotation_provenance_reads_the_labelled_rows_only():
    rows = [{"item_id": "a", "status": "labelled", "reason": None, "category": "top", "attributes": [],
             "annotator": "vlm/Qwen", "taxonomy_version": "2", "model": "Qwen", "server_version": "0.11",
             "prompt_version": "p/1", "sampling": '{"temperature": 0.0}'},
            {"item_id": "b", "status": "rejected", "reason": "no_text", "category": None, "attributes": [],
             "annotator": "catalog-text/1", "taxonomy_version": "2"}]
    out = annotation_provenance(schemas.from_rows(rows, schemas.ANNOTATIONS))
    assert out["annotators"] == ["vlm/Qwen"] and out["labelled_items"] == 1
    assert out["models"] == ["Qwen"] and out["sampling"] == [{"temperature": 0.0}]
    assert annotation_provenance(schemas.empty(schemas.ANNOTATIONS)) == {"annotators": [], "labelled_items": 0}
    assert isinstance(schemas.empty(schemas.ANNOTATIONS), pa.Table)
