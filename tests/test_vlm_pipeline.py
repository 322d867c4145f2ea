"""The release build with an image model configured (annotate.endpoint): the Dagster graph's `annotations` asset
labels every product's packshot through a scripted OpenAI-compatible server, the judge's acceptance-rate check
blocks a release whose labels the judge rejects, and a good server's labels are the release's labels, with the
models named in the manifest."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import yaml
from dagster import AssetSelection, DagsterInstance, materialize

from assets.definitions import ALL_ASSETS, CRAWL_SELECTION
from assets.io import TableIOManager
from assets.partitions import crawl_key
from assets.resources import LookbenchConfig
from lookbench_pipeline import schemas
from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.config import load_config
from lookbench_pipeline.pipeline import stage_attributes, store_of
from lookbench_pipeline.releases import list_releases, read_file, read_manifest
from lookbench_pipeline.demo.scripted_openai import ScriptedOpenAI
from lookbench_pipeline.vlm import JUDGE_PROMPT_VERSION, PROMPT_VERSION

MODEL = "Qwen/Qwen2.5-VL-72B-Instruct"
WINDOW = "2026-07-01"


def _config(tmp_path, name: str, url: str, cache: str) -> str:
    cfg = {"data_dir": "data", "store": {"url": "store"}, "sites": ["demo.yaml"],
           "annotate": {"endpoint": url, "model": MODEL, "cache": cache, "concurrency": 8, "max_retries": 1,
                        "backoff_s": 0.01, "min_acceptance": 0.9},
           # this test counts the image model's requests for the real items; with the AI-generated subsets on, the
           # same model also labels every generated picture (tests/test_aigen.py covers that)
           "aigen": {"enabled": False}}
    (tmp_path / name).write_text(yaml.safe_dump(cfg))
    return str(tmp_path / name)


def _resources(path: str) -> dict:
    return {"lookbench": LookbenchConfig(config_path=path), "io_manager": TableIOManager(config_path=path)}


def test_release_labels_come_from_the_image_model_and_the_judge_gates_them(tmp_path):
    site = yaml.safe_load(open("lookbench_pipeline/data/sites/demo.yaml"))
    site.update(demo_products=12, demo_looks=3)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    n_items = len(demo_shop.catalogue(12, 3, site["demo_seed"], site["demo_colour_models"]))  # one per colour
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sites", ["demo"])
    release_sel = AssetSelection.all() - CRAWL_SELECTION
    with ScriptedOpenAI(MODEL, reject_rate=0.5, version="0.32.0") as strict, \
            ScriptedOpenAI(MODEL, version="0.32.0") as good:
        cfg_strict = _config(tmp_path, "strict.yaml", strict.url, "cache-strict.sqlite")
        cfg_good = _config(tmp_path, "good.yaml", good.url, "cache-good.sqlite")
        assert materialize(ALL_ASSETS, selection=CRAWL_SELECTION, partition_key=crawl_key(WINDOW, "demo"),
                           instance=instance, resources=_resources(cfg_strict)).success

        # 1. a judge that rejects half the labels: the blocking check fails, nothing downstream runs
        r = materialize(ALL_ASSETS, selection=release_sel, partition_key=WINDOW, instance=instance,
                        resources=_resources(cfg_strict), raise_on_error=False)
        assert not r.success
        checks = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
                  for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
        bad = checks["judge_acceptance_rate"]
        assert not bad.passed and bad.metadata["acceptance_rate"].value < 0.9
        done = {e.asset_key.to_user_string() for e in r.get_asset_materialization_events()}
        assert "annotations" in done and not {"release_candidate", "release", "evaluation"} & done
        assert list_releases(store_of(load_config(cfg_strict))) == []
        assert strict.requests("lookbench_") and all(q["model"] == MODEL for q in strict.log)

        # 2. a judge that accepts: the release is published with the image model's labels
        r = materialize(ALL_ASSETS, selection=release_sel, partition_key=WINDOW, instance=instance,
                        resources=_resources(cfg_good))
        assert r.success
        log = good.requests()
    cfg = load_config(cfg_good)
    ann = pq.read_table(cfg.data_dir / "assets/annotations" / f"{WINDOW}.parquet")
    assert ann.schema.equals(schemas.ANNOTATIONS)
    name = f"vlm:{MODEL}@{PROMPT_VERSION}+judge:{MODEL}@{JUDGE_PROMPT_VERSION}"
    rows = ann.to_pylist()
    assert len(rows) == n_items and all(x["status"] == "labelled" and x["annotator"] == name for x in rows)
    assert all(x["model"] == MODEL and x["server_version"] == "0.32.0" and x["judge_model"] == MODEL for x in rows)
    assert all(x["judge_verdicts"] and x["image_sha256"] and json.loads(x["sampling"])["temperature"] == 0.0
               for x in rows)
    # one attributes question and one judge question per product (the category came from the catalogue text)
    assert len([q for q in log if q["schema"].endswith("_v2.0.0") and "_judge_" not in q["schema"]]) == n_items
    assert len([q for q in log if "_judge_" in q["schema"]]) == n_items and len(log) == 2 * n_items
    # the release rows carry exactly those labels
    store = store_of(cfg)
    [version] = list_releases(store)
    manifest = read_manifest(store, version)
    by_item = {x["item_id"]: x for x in rows}
    q = read_file(store, version, "real_studio_flat", "query").to_pylist()
    g = read_file(store, version, "real_studio_flat", "gallery").to_pylist()
    assert q and g
    for row in q + g:
        a = by_item[row["item_ID"]]
        assert row["annotator"] == name and row["category"] == a["category"]
        assert row["attributes"] == a["attributes"]
    # the manifest names the models and what the judge thought
    assert manifest["annotators"] == [name]
    m = manifest["annotation"]
    assert m["models"] == [MODEL] and m["judge_models"] == [MODEL] and m["server_versions"] == ["0.32.0"]
    assert m["prompt_versions"] == [PROMPT_VERSION] and m["judge_prompt_versions"] == [JUDGE_PROMPT_VERSION]
    assert m["sampling"] == [{"temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": 0}]
    assert m["acceptance"]["overall"] == 1.0 and m["acceptance"]["judged"] > 0
    mats = {e.asset_key.to_user_string(): e.materialization.metadata for e in r.get_asset_materialization_events()}
    md = mats["annotations"]
    assert md["items"].value == md["labelled"].value + md["rejected"].value + md["failed"].value == n_items
    assert md["acceptance"].value["overall"] == 1.0 and md["acceptance"].value["by_attribute"]
    # every representative image was fitted once, by the first run, and both runs' annotators sent the stored bytes
    fi = md["fitted_inputs"].value
    assert fi["images"] == fi["reused"] and fi["fitted"] == 0 and not fi["refused"] and not fi["unreadable"]
    assert fi["read_by_annotator"] == fi["images"] > 0


def test_stage_attributes_without_endpoint_is_the_text_baseline(tmp_path):
    import pyarrow as pa

    cfg = load_config(None, data_dir=str(tmp_path))
    products = schemas.from_rows([{"product_id": "p1", "title": "Red striped t-shirt", "site": "s"},
                                  {"product_id": "p2", "title": "Armchair", "site": "s"}], schemas.PRODUCTS)
    table, counts = stage_attributes(cfg, products, schemas.empty(schemas.DROP_ITEMS))
    assert isinstance(table, pa.Table) and counts["annotator"] == "catalog-text/1"
    assert counts["items"] == counts["labelled"] + counts["rejected"] + counts["failed"] == 2
    assert table.column("model").to_pylist() == [None, None]
    cfg = load_config(None, data_dir=str(tmp_path), annotate={"endpoint": "http://127.0.0.1:9/v1"})
    try:
        stage_attributes(cfg, products, schemas.empty(schemas.DROP_ITEMS))
    except ValueError as exc:
        assert "image_refs" in str(exc)
    else:
        raise AssertionError("an endpoint without image_refs must be refused")


def test_dagster_instance_limits_the_vllm_pool(tmp_path, monkeypatch):
    """dagster.yaml (the instance `make demo` / `make dev` use) caps runs in the `vllm` pool at one, at run
    granularity (the run queue holds a second annotating run; an in-process build is never blocked)."""
    import shutil

    from dagster._core.instance.config import PoolGranularity

    from assets.attributes import annotations

    shutil.copy("dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    pools = DagsterInstance.get().get_concurrency_config().pool_config
    assert pools.default_pool_limit == 1 and pools.pool_granularity == PoolGranularity.RUN
    assert annotations.op.pool == "vllm"
