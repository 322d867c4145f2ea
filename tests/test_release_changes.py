"""What changed since the previous release (changes.parquet, CHANGES.md, the manifest's summary), and reproducible
releases: the same inputs published twice give the same bytes in every file but the manifest's build time."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow.parquet as pq
import pytest
from release_factory import make_release

from lookbench_pipeline import schemas
from lookbench_pipeline.releases import ReleaseExistsError, all_files, changes, pull, read_manifest
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import LocalStore

V1, V2, V3 = "v20251231", "v20260630", "v20261231"


def test_changes_since_the_previous_release(tmp_path):
    store = LocalStore(tmp_path / "store")
    m1 = publish(make_release(V1, range(0, 6)), store, {})
    assert m1["changes"] == {"previous_version": None,
                             "items_added": {"real_streetlook/gallery": 6, "real_streetlook/query": 2,
                                             "real_studio_flat/gallery": 6, "real_studio_flat/query": 6},
                             "items_retired": {}}
    # v2: items 0-2 retired, 6-8 added, and every new item is a dress: the category shares move
    m2 = publish(make_release(V2, range(3, 9), category_of=lambda i: "dress" if i >= 6 else
                              ["top", "dress", "skirt"][i % 3]), store, {})
    assert m2["changes"]["previous_version"] == V1
    assert m2["changes"]["items_added"]["real_studio_flat/query"] == 3
    assert m2["changes"]["items_retired"]["real_studio_flat/query"] == 3
    pull(store, V2, tmp_path / "pulled", progress=False)
    t = pq.read_table(tmp_path / "pulled" / V2 / "changes.parquet")
    assert t.schema.equals(schemas.RELEASE_CHANGES)
    rows = [r for r in t.to_pylist() if (r["subset"], r["role"]) == ("real_studio_flat", "query")]
    added = {r["item_ID"] for r in rows if r["change"] == "item_added"}
    retired = {r["item_ID"] for r in rows if r["change"] == "item_retired"}
    assert added == {"item006", "item007", "item008"} and retired == {"item000", "item001", "item002"}
    assert all(r["previous_version"] == V1 and r["version"] == V2 for r in rows)
    share = {r["category"]: r for r in rows if r["change"] == "category_share"}
    # before: items 0-5 -> top 2, dress 2, skirt 2 of 6; now: items 3-8 -> top 1 (3), dress 4 (4,6,7,8), skirt 1 (5)
    assert share["dress"]["previous_share"] == pytest.approx(2 / 6)
    assert share["dress"]["current_share"] == pytest.approx(4 / 6)
    assert share["dress"]["share_delta"] == pytest.approx(2 / 6)
    assert share["top"]["current_count"] == 1 and share["top"]["previous_count"] == 2
    # attribute shares are within the category: the colours of the dresses
    dress_colors = {r["value"]: r for r in rows if r["change"] == "attribute_share" and r["category"] == "dress"
                    and r["attribute"] == "color"}
    assert sum(r["current_share"] for r in dress_colors.values()) == pytest.approx(1.0)
    assert sum(r["previous_share"] for r in dress_colors.values()) == pytest.approx(1.0)
    md = (tmp_path / "pulled" / V2 / "CHANGES.md").read_text()
    # 6 items before and now (one row each), 3 added, 3 retired
    assert f"**{V1}**" in md and "| real_studio_flat/query | 6 | 6 | 3 | 3 | 6 | 6 |" in md
    assert "| real_studio_flat/query | dress | 33.3% (2) | 66.7% (4) | +33.3 |" in md


def test_diff_of_identical_releases_is_empty_but_for_shares():
    rel = make_release(V1, range(0, 5))
    cols = {k: v.select(changes.COLUMNS) for k, v in rel.files.items()}
    t = changes.diff(V2, V1, cols, cols)
    assert set(t["change"].to_pylist()) == {"category_share", "attribute_share"}
    assert all(d == 0 for d in t["share_delta"].to_pylist())
    assert "No shift." in changes.markdown(t, V2, V1)


def test_previous_release_that_does_not_verify_stops_publishing(tmp_path):
    store = LocalStore(tmp_path / "store")
    publish(make_release(V1, range(0, 4)), store, {})
    store.put_bytes(f"releases/{V1}/real_studio_flat/query.parquet", b"tampered")
    with pytest.raises(changes.ChangesError, match="does not match"):
        publish(make_release(V2, range(2, 6)), store, {})
    assert not store.exists(f"releases/{V2}/manifest.json")


def test_two_builds_from_the_same_inputs_have_the_same_checksums(tmp_path):
    manifests, stores = [], []
    for n, now in enumerate((datetime(2026, 7, 1, 3, tzinfo=timezone.utc), datetime(2026, 7, 2, 9, tzinfo=timezone.utc))):
        store = LocalStore(tmp_path / f"store{n}")
        publish(make_release(V1, range(0, 6)), store, {"code_version": "x"}, now=now)
        manifests.append(publish(make_release(V2, range(3, 9)), store, {"code_version": "x"}, now=now))
        stores.append(store)
    a, b = manifests
    assert all_files(a) == all_files(b)
    assert {k for k in set(a) | set(b) if a.get(k) != b.get(k)} == {"built_at"}
    for key in all_files(a):
        assert stores[0].get_bytes(f"releases/{V2}/{key}") == stores[1].get_bytes(f"releases/{V2}/{key}"), key
    ma, mb = (json.loads(s.get_bytes(f"releases/{V2}/manifest.json")) for s in stores)
    assert {k for k in ma if ma[k] != mb[k]} == {"built_at"}


def test_a_published_version_is_never_overwritten(tmp_path):
    store = LocalStore(tmp_path / "store")
    m = publish(make_release(V1, range(0, 4)), store, {}, card={"license": "cc-by-nc-4.0"})
    # same data, other card: the documents differ, so it is another release; refused, nothing rewritten
    with pytest.raises(ReleaseExistsError, match="immutable"):
        publish(make_release(V1, range(0, 4)), store, {}, card={"license": "cc-by-4.0"})
    assert read_manifest(store, V1) == m
    again = publish(make_release(V1, range(0, 4)), store, {}, card={"license": "cc-by-nc-4.0"})
    assert again["already_published"]
    readme = store.get_bytes(f"releases/{V1}/README.md").decode()
    assert "license: cc-by-nc-4.0" in readme and "license_name" not in readme
    # an older version published later does not move `latest` back
    publish(make_release(V3, range(0, 4)), store, {})
    publish(make_release(V2, range(0, 4)), store, {})
    assert store.get_bytes("releases/latest") == V3.encode()
    assert read_manifest(store, V2)["changes"]["previous_version"] == V1
