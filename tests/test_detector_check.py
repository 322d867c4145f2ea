"""The ``detector`` asset's check: the record the manifest publishes is that of the detector that produced the
detections (weights sha256, every class mapped to taxonomy categories, detections of its classes only)."""

import pyarrow as pa

from lookbench_pipeline import quality

SHA = "ab" * 32
CATEGORIES = {"top", "trousers", "dress"}


def _detections(*rows):
    return pa.table({"model_class": [r[0] for r in rows], "categories": [r[1] for r in rows]},
                    schema=pa.schema([("model_class", pa.string()), ("categories", pa.list_(pa.string()))]))


def test_a_record_that_fits_its_detections_has_no_problem():
    rec = {"weights_sha256": SHA, "classes": ["upper", "lower"], "class_map": {"upper": ["top"], "lower": ["trousers"]}}
    assert quality.detector_problems(rec, _detections(("upper", ["top"]), ("lower", ["trousers"])), CATEGORIES) == []
    assert quality.detector_problems({"enabled": False}, _detections(), CATEGORIES) == []
    assert quality.detector_problems({"enabled": True, "used": False}, _detections(), CATEGORIES) == []


def test_each_way_a_record_can_be_wrong_is_named():
    rec = {"weights_sha256": "not-a-sha", "classes": ["upper", "lower"], "class_map": {"upper": ["top", "hat"]}}
    problems = quality.detector_problems(rec, _detections(("upper", ["top"]), ("shoe", [])), CATEGORIES)
    assert any(p.startswith("weights_sha256 'not-a-sha'") for p in problems), problems
    assert any(p.startswith("class_map keys ['upper'] are not the classes") for p in problems), problems
    assert any("not in the taxonomy: {'upper': ['hat']}" in p for p in problems), problems
    assert any("classes the detector does not have: {'shoe': 1}" in p for p in problems), problems
    assert any("categories are not their class's mapping: {'upper': 1}" in p for p in problems), problems
    assert quality.detector_problems({"enabled": False}, _detections(("upper", ["top"])), CATEGORIES) == [
        "1 detections but no detector recorded ({'enabled': False})"]
