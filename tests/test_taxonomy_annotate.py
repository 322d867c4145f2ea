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
    assert tax.version == "2.0.0"
    assert len(tax.categories) >= 8
    assert {"top", "shirt", "dress", "skirt", "trousers", "outerwear", "shoes", "bag"} <= set(tax.categories)
    assert tax.n_attribute_values >= 100
    assert {"neckline", "collar", "sleeve_length", "length", "fit", "silhouette", "closure", "material", "pattern",
            "color", "details"} <= set(tax.values)
    for c in tax.categories.values():
        assert c.main_attribute in c.attributes
        assert set(c.allowed) == set(c.attributes)
    s = tax.json_schema("dress")
    assert s["properties"]["length"]["enum"][-1] == "not visible"
    assert set(s["required"]) == set(tax.categories["dress"].attributes)
    # category-specific: a skirt's length is never a trouser length, shoes have no neckline
    assert set(tax.allowed("skirt", "length")).isdisjoint({"full_length", "ankle", "cropped"})
    assert "neckline" not in tax.categories["shoes"].attributes
    assert tax.validate_labels("skirt", {"length": "full_length"}) != []


def test_fashionpedia_grounding(tax, realdata):
    import json

    fp = json.loads((realdata / "annotations/fashionpedia_category_attributes_descriptions.json").read_text())
    names = {c["name"] for c in fp["categories"]}
    ids = {a["id"] for a in fp["attributes"]}
    for c in tax.categories.values():
        assert set(c.fashionpedia) <= names, c.name
    mapped = 0
    for attr, vals in tax.fashionpedia.items():
        for v, fp_ids in vals.items():
            assert set(fp_ids) <= ids, (attr, v, fp_ids)
            assert set(tax.fashionpedia_categories[attr][v]) <= names, (attr, v)
            mapped += bool(fp_ids or tax.fashionpedia_categories[attr][v])
    # the garment vocabularies come from Fashionpedia: every neckline, sleeve length, waist and pattern value maps
    for attr in ("neckline", "sleeve_length", "sleeve_type", "waist", "pattern", "length"):
        assert all(tax.fashionpedia[attr][v] for v in tax.values[attr] if v != "collared"), attr
    assert mapped >= 150


def test_version_1_still_loads():
    from lookbench_pipeline.config import PACKAGE_DATA

    t1 = Taxonomy.load(PACKAGE_DATA / "taxonomy_v1.yaml")
    assert t1.version == "1.0.0" and t1.allowed("dress", "length") == ("mini", "knee", "maxi")
    label = CatalogTextAnnotator(t1).annotate("x", title="Red striped short-sleeve t-shirt")
    assert label.attributes == {"color": "red", "pattern": "striped", "sleeve_length": "short"}


def test_ambiguous_synonyms_and_unknown_values_rejected(tmp_path):
    raw = yaml.safe_load(DEFAULT_TAXONOMY.read_text())
    raw["attributes"]["color"]["values"]["navy"]["synonyms"].append("black")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(TaxonomyError, match="synonym of both"):
        Taxonomy.load(tmp_path / "t.yaml")
    raw = yaml.safe_load(DEFAULT_TAXONOMY.read_text())
    raw["categories"]["skirt"]["attributes"]["length"].append("ankle_socks")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(TaxonomyError, match="ankle_socks"):
        Taxonomy.load(tmp_path / "t.yaml")


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
    # values are read within the category's own set: "long-sleeve" is not a maxi length, "cropped" is a top length
    dress = CatalogTextAnnotator(tax).annotate("d", title="Navy long-sleeve knee-length wrap dress")
    assert dress.attributes == {"color": "navy", "sleeve_length": "long", "length": "knee", "style": "wrap_dress",
                                "silhouette": "wrap"}
    jeans = CatalogTextAnnotator(tax).annotate("j", title="High-rise wide-leg cropped jeans")
    assert jeans.category == "trousers" and jeans.attributes["silhouette"] == "wide_leg"
    assert jeans.attributes["length"] == "cropped" and jeans.attributes["waist"] == "high"
    main, other = format_main_attribute(tax, label.category, label.attributes)
    assert main == "collar: not visible"
    assert other == "color: blue; material: linen; pattern: striped; sleeve_length: long"
    assert tax.validate_labels("shirt", label.attributes) == []
    assert CatalogTextAnnotator(tax).annotate("y").reason == "no_text"


def test_the_package_data_files_ship_and_are_the_defaults():
    """lookbench_pipeline.package_data names the files shipped in the package; the settings and the taxonomy
    take their defaults from it."""
    from lookbench_pipeline import package_data
    from lookbench_pipeline.config import DEFAULT_TAXONOMY, load_config

    for path in (package_data.DEFAULT_TAXONOMY, package_data.DEMO_SITE):
        assert path.is_file() and path.is_relative_to(package_data.PACKAGE_DATA)
    assert DEFAULT_TAXONOMY == package_data.DEFAULT_TAXONOMY
    assert [str(p) for p in load_config(None).sites] == [str(package_data.DEMO_SITE)]
