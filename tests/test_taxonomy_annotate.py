"""The taxonomy file and the catalogue-text annotator."""

import pytest
import yaml

from lookbench_pipeline.annotate import CatalogTextAnnotator, format_main_attribute
from lookbench_pipeline.config import DEFAULT_TAXONOMY
from lookbench_pipeline.taxonomy import Taxonomy, TaxonomyError


@pytest.fixture(scope="module")
def tax():
    return Taxonomy.load()


def test_taxonomy_shape(tax):
    assert len(tax.categories) >= 8
    for c in tax.categories.values():
        assert c.main_attribute in c.attributes
    s = tax.json_schema("dress")
    assert s["properties"]["length"]["enum"][-1] == "not visible"
    assert set(s["required"]) == set(tax.categories["dress"].attributes)


def test_fashionpedia_grounding(tax, realdata):
    import json

    fp = json.loads((realdata / "annotations/fashionpedia_category_attributes_descriptions.json").read_text())
    names = {c["name"] for c in fp["categories"]}
    for c in tax.categories.values():
        assert set(c.fashionpedia) <= names, c.name


def test_invalid_taxonomy_rejected(tmp_path):
    raw = yaml.safe_load(DEFAULT_TAXONOMY.read_text())
    raw["categories"]["top"]["main_attribute"] = "nonexistent"
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(TaxonomyError, match="main_attribute"):
        Taxonomy.load(tmp_path / "t.yaml")


@pytest.mark.parametrize("title,category", [
    ("Red striped short-sleeve t-shirt", "top"),
    ("BULL BAROQUE - Slim fit jeans - azzurro scuro", "trousers"),
    ("T-shirt dress in cotton", "dress"),
    ("MAVIS - Winter coat - black", "outerwear"),
    ("Lace-up ankle boots - graphit", "shoes"),
    ("Penhook 20.47'' Wide Armchair", None),
])
def test_categories_from_titles(tax, title, category):
    label = CatalogTextAnnotator(tax).annotate("x", title=title)
    assert label.category == category
    assert label.status == ("labelled" if category else "rejected")
    assert label.annotator == "catalog-text/1"


def test_attributes_and_lookbench_columns(tax):
    label = CatalogTextAnnotator(tax).annotate("x", title="Blue striped long-sleeve shirt", material="linen")
    assert label.attributes == {"color": "blue", "pattern": "striped", "sleeve_length": "long", "material": "linen"}
    main, other = format_main_attribute(tax, label.category, label.attributes)
    assert main == "collar: not visible"
    assert other == "color: blue; material: linen; pattern: striped; sleeve_length: long"
    assert tax.validate_labels("shirt", label.attributes) == []
    assert CatalogTextAnnotator(tax).annotate("y").reason == "no_text"
