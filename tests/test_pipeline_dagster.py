"""The whole asset graph materialized for one release partition with Dagster's own APIs, twice."""

import json

import pyarrow.parquet as pq
from dagster import AssetSelection, DagsterInstance, materialize

from assets.definitions import ALL_ASSETS, ALL_CHECKS, CRAWL_SELECTION, build_defs
from assets.partitions import crawl_key
from assets.io import TableIOManager
from assets.resources import LookbenchConfig
from lookbench_pipeline.config import load_config
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.releases import list_releases, read_file


class _Both:
    """The crawl run(s) and the release run of one window, materialized with Dagster's own APIs."""

    def __init__(self, crawl, release):
        self.crawl, self.release = crawl, release
        self.success = crawl.success and release.success

    def output_for_node(self, *a):
        return self.release.output_for_node(*a)

    def get_asset_materialization_events(self):
        return self.crawl.get_asset_materialization_events() + self.release.get_asset_materialization_events()


def _materialize(cfg_path, instance):
    resources = {"lookbench": LookbenchConfig(config_path=str(cfg_path)),
                 "io_manager": TableIOManager(config_path=str(cfg_path))}
    instance.add_dynamic_partitions("sites", [s for s in ["demo"] if not instance.has_dynamic_partition("sites", s)])
    crawl = materialize([*ALL_ASSETS, *ALL_CHECKS], selection=CRAWL_SELECTION,
                        partition_key=crawl_key("2026-07-01", "demo"), instance=instance, resources=resources)
    release = materialize([*ALL_ASSETS, *ALL_CHECKS], selection=AssetSelection.all() - CRAWL_SELECTION,
                          partition_key="2026-07-01", instance=instance, resources=resources)
    return _Both(crawl, release)


def test_definitions_load():
    defs = build_defs()
    job = defs.resolve_job_def("release_job")
    assert {n.name for n in job.nodes} >= {"image_intake", "image_clusters", "annotations", "release", "evaluation",
                                          "generation_requests", "generated_images", "aigen_intake",
                                          "generated_checks", "crawl_catalog"}
    crawl_ops = {n.name for n in defs.resolve_job_def("crawl_job").nodes}
    assert "crawl" in crawl_ops and all(n.startswith("weekly_") for n in crawl_ops - {"crawl"})  # + its checks
    assert defs.resolve_schedule_def("semiannual_release") is not None
    assert defs.resolve_schedule_def("weekly_crawl") is not None


def test_materialize_whole_graph_twice(demo_config):
    instance = DagsterInstance.ephemeral()
    r1 = _materialize(demo_config, instance)
    assert r1.success
    checks = {(e.asset_check_evaluation_data.asset_key.to_user_string(), e.asset_check_evaluation_data.check_name):
              e.asset_check_evaluation_data.passed
              for e in r1.crawl.all_events + r1.release.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert {("release_candidate", n) for n in ("has_queries", "schema", "every_query_has_a_positive",
                                               "no_image_in_query_and_gallery", "unique_sample_ids")} <= set(checks)
    assert checks[("annotations", "judge_acceptance_rate")]  # no judge: catalogue-text labels
    # assets/checks.py: a check on every stage, all passing on the demo
    assert {a for a, _ in checks} >= {"weekly_products", "products", "image_refs", "images", "image_clusters",
                                      "contamination", "annotations", "release_candidate", "release", "evaluation"}
    assert all(checks.values()), [k for k, v in checks.items() if not v]
    cfg = load_config(demo_config)
    store = store_of(cfg)
    [version] = list_releases(store)
    m1 = r1.output_for_node("release")
    assert m1["version"] == version and set(m1["files"]) >= {"real_studio_flat/query.parquet",
                                                               "real_streetlook/query.parquet"}
    q = read_file(store, version, "real_studio_flat", "query")
    g = read_file(store, version, "real_studio_flat", "gallery")
    for col in ("image", "item_ID", "category", "main_attribute", "other_attributes", "task", "difficulty",
                "source_url", "site", "crawled_at", "first_seen_at", "image_sha256"):
        assert col in q.column_names
    assert set(q["item_ID"].to_pylist()) <= set(g["item_ID"].to_pylist()), "every query has a positive"
    # counts reconcile at every stage
    mats = {e.asset_key.to_user_string(): e.materialization.metadata
            for e in r1.get_asset_materialization_events()}
    md = mats["image_refs"]
    assert md["in"].value == md["accepted"].value + md["rejected"].value
    c = m1["counts"]
    assert c["candidates"] == c["query_rows"] + c["gallery_rows_distinct"] + c["rejected"]
    # the AI-generated subsets: drawn by the scripted endpoint on 127.0.0.1, checked, in the release
    assert {"aigen_studio/query.parquet", "aigen_streetlook/query.parquet"} <= set(m1["files"])
    assert m1["aigen"]["generators"] and m1["aigen"]["endpoint"].startswith("scripted")
    for name, total in (("generated_images", "requests"), ("aigen_image_refs", "in"), ("generated_checks", "in")):
        md = mats[name]
        parts = {"generated_images": ("generated", "failed", "pending", "skipped"),
                 "aigen_image_refs": ("accepted", "rejected"), "generated_checks": ("accepted", "rejected")}[name]
        assert md[total].value == sum(md[p].value for p in parts) > 0
    aq = read_file(store, version, "aigen_studio", "query")
    assert set(aq["task"].to_pylist()) == {"single-item"} and set(aq["difficulty"].to_pylist()) == {"medium"}
    assert all(g["generator_model"] for g in aq["generation"].to_pylist())
    scores = r1.output_for_node("evaluation")
    assert {"coarse_recall@1", "fine_recall@1", "ndcg@5"} <= set(scores["metric"].to_pylist())
    assert "overall" in scores["subset"].to_pylist()
    assert any(s.startswith("legacy:") for s in scores["subset"].to_pylist()), "legacy beside live"
    assert store.exists(f"reports/{version}/index.html") and store.exists(f"reports/{version}/leaderboard.parquet")
    assert str(mats["evaluation"]["report"].value).endswith(f"reports/{version}/index.html")
    first_seen_1 = pq.read_table(cfg.data_dir / "state/demo/products.parquet")["first_seen_at"].to_pylist()
    _check_street_looks(cfg, store, version, m1, mats)

    # second run, nothing new: first_seen_at kept, the release is a byte-identical no-op
    stored = {a: (cfg.data_dir / "assets" / a / "2026-07-01.parquet").read_bytes()
              for a in ("detections", "generated_images", "generated_checks", "evaluation")}
    r2 = _materialize(demo_config, instance)
    assert r2.success
    m2 = r2.output_for_node("release")
    assert m2.get("already_published") and m2["files"] == m1["files"]
    assert m2["metadata_files"] == m1["metadata_files"]  # card, Croissant and changes are reproducible too
    first_seen_2 = pq.read_table(cfg.data_dir / "state/demo/products.parquet")["first_seen_at"].to_pylist()
    assert first_seen_1 == first_seen_2
    # stages whose inputs, code and configuration did not change are skipped, their stored values reused
    # (assets/reuse.py), and say so in their metadata
    mats2 = {e.asset_key.to_user_string(): e.materialization.metadata for e in r2.get_asset_materialization_events()}
    reused = {a for a, md in mats2.items() if "lookbench/reused_from_run" in md}
    assert reused == {"detections", "detector", "generated_images", "aigen_detections", "generated_checks",
                      "evaluation"}
    assert {mats2[a]["lookbench/reused_from_run"].value for a in reused} == {r1.release.run_id}
    assert mats2["evaluation"]["report"] == mats["evaluation"]["report"]
    assert r2.output_for_node("evaluation").equals(scores)
    assert all((cfg.data_dir / "assets" / a / "2026-07-01.parquet").read_bytes() == b for a, b in stored.items())
    assert r2.release.output_for_node("detect_garments", "detections").equals(
        r1.release.output_for_node("detect_garments", "detections"))
    # the second run read the week's finished crawl back; with reuse off (lookbench build --force) the week is
    # crawled again: a new crawl, archived beside the first, first_seen_at kept
    [attempts] = list(cfg.data_dir.glob("crawls/*/demo/crawl/attempts.json"))
    first_crawl = json.loads(attempts.read_text())["crawl_id"]
    archives = sorted(k for k in store.list("warc/demo/") if k.endswith(".json"))
    again = materialize([*ALL_ASSETS, *ALL_CHECKS], selection=CRAWL_SELECTION,
                        partition_key=crawl_key("2026-07-01", "demo"), instance=instance,
                        resources={"lookbench": LookbenchConfig(config_path=str(demo_config), reuse_unchanged=False),
                                   "io_manager": TableIOManager(config_path=str(demo_config))})
    assert again.success
    assert json.loads(attempts.read_text())["crawl_id"] != first_crawl
    assert len([k for k in store.list("warc/demo/") if k.endswith(".json")]) == len(archives) + 1
    assert pq.read_table(cfg.data_dir / "state/demo/products.parquet")["first_seen_at"].to_pylist() == first_seen_1


def test_demo_legacy_leak_is_kept_out_of_queries(demo_config):
    r = _materialize(demo_config, DagsterInstance.ephemeral())
    assert r.success
    m = r.output_for_node("release")
    assert m["counts"]["rejected_by_reason"].get("contamination:fashion200k-demo", 0) >= 1
    found = r.output_for_node("contamination_check", "contamination")
    assert "fashion200k-demo" in set(found["source"].to_pylist())
    # the same Fashion200K-format tree gives the release its noise gallery: distractors mined with the
    # configured model, named with its thresholds in the manifest, and never a copy of a shop image
    assert m["files"]["noise/gallery.parquet"]["rows"] > 0
    assert m["negatives"]["model"]["model_id"] == "baseline/hsv-hog-v1" and m["negatives"]["band"] == [0.55, 0.95]
    # the manifest lists every model the release depends on: the detector of the street looks and the mining model
    roles = {x["role"]: x for x in m["models"]}
    assert sorted(roles) == ["detector", "negatives_mining"]
    assert roles["negatives_mining"] == {"role": "negatives_mining", **m["negatives"]["model"]}
    neg = r.output_for_node("negatives")
    assert neg.num_rows and "soft" in set(neg["kind"].to_pylist())
    store = store_of(load_config(demo_config))
    noise = read_file(store, m["version"], "noise", "gallery")
    assert not set(noise["source_url"].to_pylist()) & set(found["matched_path"].to_pylist())
    assert set(noise["image_sha256"].to_pylist()) == set(neg["distractor_sha256"].to_pylist())
    scores = r.output_for_node("evaluation")
    assert {"distractor@1", "soft_negative@1"} <= set(scores["metric"].to_pylist())
    # every registry model that runs here is scored: the baseline (256-d) and the wheel-shipped EfficientNet-Lite0
    # and its random floor (1280-d), each with its own embedding size
    dims = dict(zip(scores["model"].to_pylist(), scores["model_dim"].to_pylist()))
    assert dims["baseline/hsv-hog-v1"] == 256
    assert all(d == {"efficientnet-lite0/imagenet": 1280, "efficientnet-lite0/random-init": 1280}.get(m, 256)
               for m, d in dims.items()), dims


def test_whole_graph_on_an_s3_store(tmp_path, s3_server, s3_env):
    """The same build with the object store on a real S3-compatible server (moto) instead of a folder."""
    import boto3
    import yaml

    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket="bench")
    site = yaml.safe_load(open("lookbench_pipeline/data/sites/demo.yaml"))
    site.update(demo_products=12, demo_looks=3)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({
        "data_dir": "data", "sites": ["demo.yaml"],
        "store": {"url": "s3://bench/lookbench", "endpoint_url": s3_server}}))
    r = _materialize(tmp_path / "p.yaml", DagsterInstance.ephemeral())
    assert r.success
    store = store_of(load_config(tmp_path / "p.yaml"))
    [version] = list_releases(store)
    assert read_file(store, version, "real_studio_flat", "query").num_rows > 0
    keys = list(store.list(""))
    assert any(k.startswith("originals/") for k in keys) and any(k.startswith("warc/demo/") for k in keys)


def test_dagster_cli_validates_the_workspace():
    import subprocess
    import sys
    from pathlib import Path

    dagster = Path(sys.executable).parent / "dagster"
    proc = subprocess.run([str(dagster), "definitions", "validate", "-w", "workspace.yaml"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_release_candidate_checks_run_and_block():
    from datetime import datetime, timezone

    from lookbench_pipeline import schemas
    from lookbench_pipeline.releases import ReleaseTables, check_candidate
    from lookbench_pipeline.windows import Window

    w = Window(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 7, 1, tzinfo=timezone.utc))
    row = {"image": {"bytes": b"x", "path": "a.jpg"}, "item_ID": "A", "category": "top", "sample_id": "s1",
           "image_sha256": "same", "attributes": []}
    q = schemas.from_rows([row], schemas.RELEASE)
    g = schemas.from_rows([{**row, "item_ID": "B", "sample_id": "s2"}], schemas.RELEASE)
    res = check_candidate(ReleaseTables("v1", w, {("real_studio_flat", "query"): q, ("real_studio_flat", "gallery"): g}))
    assert res["has_queries"][0] and res["schema"][0]
    assert not res["every_query_has_a_positive"][0] and not res["no_image_in_query_and_gallery"][0]


def test_failed_blocking_check_stops_publishing(demo_config, monkeypatch):
    import assets.release as rel_assets

    real = rel_assets.check_candidate

    def broken(rel):
        out = real(rel)
        out["every_query_has_a_positive"] = (False, {"queries_without_positive": {"real_studio_flat": 1}})
        return out

    monkeypatch.setattr(rel_assets, "check_candidate", broken)
    instance = DagsterInstance.ephemeral()
    resources = {"lookbench": LookbenchConfig(config_path=str(demo_config)),
                 "io_manager": TableIOManager(config_path=str(demo_config))}
    instance.add_dynamic_partitions("sites", ["demo"])
    materialize(ALL_ASSETS, selection=CRAWL_SELECTION, partition_key=crawl_key("2026-07-01", "demo"),
                instance=instance, resources=resources)
    r = materialize(ALL_ASSETS, selection=AssetSelection.all() - CRAWL_SELECTION, partition_key="2026-07-01",
                    instance=instance, resources=resources, raise_on_error=False)
    assert not r.success
    done = {e.asset_key.to_user_string() for e in r.get_asset_materialization_events()}
    assert "release_candidate" in done and "release" not in done and "evaluation" not in done
    assert list_releases(store_of(load_config(demo_config))) == []


def test_site_partitions_of_other_configs_are_ignored(demo_config):
    """An instance shared with another configuration (another site registered) still builds this config's release."""
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sites", ["some-other-shop"])
    assert _materialize(demo_config, instance).success


def _check_street_looks(cfg, store, version, manifest, mats):
    """Street looks went through garment detection: each matched item is a query (its crop, look id, item index,
    box); the manifest names the detector; with detection off, the fallback makes whole-image queries."""
    import io

    from PIL import Image

    from lookbench_pipeline.pipeline import stage_release
    from lookbench_pipeline.windows import Window

    q = read_file(store, version, "real_streetlook", "query").to_pylist()
    assert q and all(r["look_id"] and r["item_index"] is not None and r["box"] is not None for r in q)
    for r in q:
        assert Image.open(io.BytesIO(r["image"]["bytes"])).size == (r["width"], r["height"])  # the crop
        x1, y1, x2, y2 = r["box"]
        assert 0 <= x1 < x2 <= 640 and 0 <= y1 < y2 <= 800
    [det] = [m for m in manifest["models"] if m["role"] == "detector"]
    assert det["weights"] == "demo" and len(det["weights_sha256"]) == 64 and 0 < det["map50"] <= 1
    md = mats["detections"]
    assert md["boxes"].value == md["kept"].value + md["dropped"].value
    assert md["kept"].value == md["matched"].value + md["unlabelled"].value
    items = manifest["counts"]["street_look_items"]
    assert items["matched"] >= len(q) and items["items_detected"] == md["kept"].value

    def table(name):
        return pq.read_table(next((cfg.data_dir / "assets" / name).glob("*.parquet")))

    tables = {"products": table("products"), "looks": table("looks"), "drop_items": table("drop_items"),
              "image_refs": table("image_refs"), "images": table("images"), "clusters": table("image_clusters"),
              "annotations": table("annotations"), "contamination": table("contamination"),
              "detections": table("detections")}
    window = Window(*[__import__("datetime").datetime.fromisoformat(manifest["window"][k]) for k in ("start", "end")])
    off = stage_release(cfg.model_copy(update={"detect": cfg.detect.model_copy(update={"enabled": False})}),
                        version, window, tables, store)
    fq = off.files[("real_streetlook", "query")].to_pylist()
    assert fq and all(r["box"] is None and r["item_index"] is None for r in fq)
    assert {r["image_sha256"] for r in fq} <= set(tables["images"]["image_sha256"].to_pylist())  # whole look images
    c = off.counts
    assert c["candidates"] == c["query_rows"] + c["gallery_rows_distinct"] + c["rejected"]
