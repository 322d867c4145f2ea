"""Consumers' side: pull a release with verification, and the documented DuckDB queries run on it."""

import re
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterInstance

from lookbench_pipeline.config import load_config
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.releases import docs as release_docs
from lookbench_pipeline.releases import ReleaseIntegrityError, list_releases, pull

ROOT = Path(__file__).resolve().parents[1]


def test_pull_and_documented_duckdb_queries(demo_config, tmp_path):
    from test_pipeline_dagster import _materialize

    assert _materialize(demo_config, DagsterInstance.ephemeral()).success
    store = store_of(load_config(demo_config))
    [version] = list_releases(store)
    files = pull(store, version, tmp_path / "pulled", progress=False)
    rel = tmp_path / "pulled" / version
    assert (rel / "manifest.json").is_file()
    assert sorted(f.relative_to(rel).as_posix() for f in files) == sorted(
        ["real_studio_flat/query.parquet", "real_studio_flat/gallery.parquet", "real_streetlook/query.parquet",
         "real_streetlook/gallery.parquet", "noise/gallery.parquet", "aigen_studio/query.parquet",
         "aigen_studio/gallery.parquet", "aigen_streetlook/query.parquet", "aigen_streetlook/gallery.parquet",
         "README.md", "croissant.json", "CHANGES.md", "changes.parquet", *release_docs.PATHS])
    blocks = re.findall(r"```sql\n(.*?)```", (ROOT / "docs/QUERIES.md").read_text(), re.S)
    queries, change_queries = blocks[0], blocks[1]
    results = [duckdb.sql(q.replace("RELEASE", str(rel))).fetchall() for q in queries.split(";") if "SELECT" in q]
    counts, attrs, window, noise, after, items = results
    subsets = {r[0] for r in counts}
    assert {"real_studio_flat", "real_streetlook", "noise"} <= subsets
    assert noise and all(n > 0 for *_, n in noise)
    assert any(r[0] == "color" for r in attrs)
    first, last, n = window[0]
    assert first.tzinfo is not None and first <= last and n > 0
    assert after[0][0] == n, "the demo's items were all first seen today"
    # the changes queries: the demo release is the first one, so every item is added and nothing retired
    added, shifts = [duckdb.sql(q.replace("RELEASE", str(rel))).fetchall()
                     for q in change_queries.split(";") if "SELECT" in q]
    assert {r[2] for r in added} == {"item_added"}
    n_query_items = duckdb.sql(f"SELECT count(DISTINCT item_ID) FROM read_parquet('{rel}/real_studio_flat/query.parquet')"
                               ).fetchall()[0][0]
    assert ("real_studio_flat", "query", "item_added", n_query_items) in added
    assert shifts and all(r[3] == 0.0 and r[4] > 0 for r in shifts)
    assert items and all(look and idx is not None and len(box) == 4 for look, idx, _, _, box in items)
    # a subset that does not exist, and a corrupted file
    with pytest.raises(ValueError, match="no subset"):
        pull(store, version, tmp_path / "x", ["nope"], progress=False)
    key = f"releases/{version}/real_studio_flat/query.parquet"
    store.put_bytes(key, b"corrupt")
    with pytest.raises(ReleaseIntegrityError):
        pull(store, version, tmp_path / "y", ["real_studio_flat"], progress=False)
    assert not (tmp_path / "y" / version / "real_studio_flat" / "query.parquet").exists()
