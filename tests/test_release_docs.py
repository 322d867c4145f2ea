"""A release explains itself: the documents it carries (taxonomy, metric definitions, table schemas, sources) are
inside the pulled folder, and every path its dataset card and Croissant file name exists there."""

from __future__ import annotations

import hashlib
import json
import re

import pyarrow.parquet as pq
import pytest
import yaml
from release_factory import make_release

from lookbench_pipeline.config import DEFAULT_TAXONOMY
from lookbench_pipeline.releases import docs as release_docs
from lookbench_pipeline.releases import pull
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import LocalStore

V1, V2 = "v20260301", "v20260701"

# a path inside a release, as the card writes it: `docs/x.md`, `real_studio_flat/query.parquet`, `CHANGES.md`
PATH_IN_CARD = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:md|json|yaml|parquet))`")


@pytest.fixture(scope="module")
def pulled(tmp_path_factory):
    root = tmp_path_factory.mktemp("selfdesc")
    store = LocalStore(root / "store")
    publish(make_release(V1, range(0, 8)), store, {"code_version": "test", "sites": ["demo"]})
    manifest = publish(make_release(V2, range(4, 14)), store, {"code_version": "test", "sites": ["demo"]})
    dest = root / "empty"
    dest.mkdir()
    pull(store, V2, dest, progress=False)
    return manifest, dest / V2


def test_every_path_the_card_and_croissant_name_is_in_the_pulled_folder(pulled):
    manifest, folder = pulled
    card = (folder / "README.md").read_text()
    named = set(PATH_IN_CARD.findall(card))
    front = yaml.safe_load(card.split("---")[1])
    named |= {f["path"] for c in front["configs"] for f in c["data_files"]}
    # the documents are named by the card, not only present
    assert set(release_docs.PATHS) <= named
    croissant = json.loads((folder / "croissant.json").read_text())
    urls = {d["contentUrl"] for d in croissant["distribution"]}
    assert set(release_docs.PATHS) <= urls and "README.md" in urls and "CHANGES.md" in urls
    for path in named | urls:
        assert (folder / path).is_file(), f"{path} is named but not in the release"
    # and each FileObject's checksum is the file's
    for d in croissant["distribution"]:
        assert hashlib.sha256((folder / d["contentUrl"]).read_bytes()).hexdigest() == d["sha256"], d["contentUrl"]


def test_taxonomy_metrics_schemas_and_sources_travel_with_the_release(pulled):
    manifest, folder = pulled
    tax = folder / "docs/taxonomy.yaml"
    assert tax.read_bytes() == DEFAULT_TAXONOMY.read_bytes()
    assert manifest["taxonomy"] == {"version": str(yaml.safe_load(tax.read_text())["version"]),
                                    "path": "docs/taxonomy.yaml",
                                    "sha256": hashlib.sha256(tax.read_bytes()).hexdigest()}
    metrics = (folder / "docs/METRICS.md").read_text()
    for term in ("Coarse Recall@K", "Fine Recall@K", "nDCG@K", "not visible", "Cutoff"):
        assert term in metrics
    schema = json.loads((folder / "docs/schema.json").read_text())
    for name, path in (("release", "real_studio_flat/query.parquet"), ("release_changes", "changes.parquet")):
        columns = schema["tables"][name]["columns"]
        actual = pq.read_schema(folder / path)
        assert [c["name"] for c in columns] == actual.names
        assert all(c["description"] for c in columns), [c["name"] for c in columns if not c["description"]]
    # the columns no row may leave null are stated so, and the published rows keep to it
    release_columns = schema["tables"]["release"]["columns"]
    assert [c["name"] for c in release_columns if not c["nullable"]] == ["item_ID", "sample_id"]
    assert pq.read_table(folder / "real_studio_flat/query.parquet").select(["item_ID", "sample_id"]).to_pandas() \
        .notna().all().all()
    sources = (folder / "docs/SOURCES.md").read_text()
    assert "demo" in sources and "judge acceptance" in sources and manifest["taxonomy"]["sha256"] in sources
    # every document is in the manifest with its checksum
    for path in release_docs.PATHS:
        meta = manifest["metadata_files"][path]
        assert hashlib.sha256((folder / path).read_bytes()).hexdigest() == meta["sha256"]


def test_changes_say_items_and_rows_apart(pulled):
    manifest, folder = pulled
    text = (folder / "CHANGES.md").read_text()
    assert "| file | items before | items now | items added | items retired | rows before | rows now |" in text
    for key, meta in manifest["files"].items():
        subset_role = key.removesuffix(".parquet")
        t = pq.read_table(folder / key)
        line = next(line for line in text.splitlines() if line.startswith(f"| {subset_role} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert int(cells[2]) == len(set(t["item_ID"].to_pylist()))  # items now
        assert int(cells[6]) == t.num_rows == meta["rows"]  # rows now


def test_a_rebuild_gives_the_same_documents(tmp_path):
    a, b = LocalStore(tmp_path / "a"), LocalStore(tmp_path / "b")
    ma = publish(make_release(V1, range(0, 6)), a, {"code_version": "x"})
    mb = publish(make_release(V1, range(0, 6)), b, {"code_version": "x"})
    assert ma["metadata_files"] == mb["metadata_files"]


def test_a_release_with_a_null_item_or_sample_id_is_not_published(tmp_path):
    """docs/schema.json states sample_id and item_ID not nullable: publish refuses tables that break it, before
    anything is written, naming the file, the column and how many rows."""
    import pyarrow as pa

    from lookbench_pipeline.releases import ReleaseIntegrityError

    rel = make_release(V1, range(0, 4))
    key = ("real_studio_flat", "query")
    t = rel.files[key]
    i = t.column_names.index("item_ID")
    rel.files[key] = t.set_column(i, "item_ID", pa.array([None] + t["item_ID"].to_pylist()[1:], pa.string()))
    store = LocalStore(tmp_path / "store")
    with pytest.raises(ReleaseIntegrityError, match=r"real_studio_flat/query\.parquet has nulls .*item_ID: 1 rows"):
        publish(rel, store, {})
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.parquet"))
