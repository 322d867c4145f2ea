"""Asset checks: the quality measures, and a bad value stopping the publish step (or not, when configured as a
warning)."""

import pyarrow as pa
import pytest
import yaml
from dagster import AssetSelection, DagsterInstance, materialize

from assets.definitions import ALL_ASSETS, ALL_CHECKS, CRAWL_SELECTION
from assets.io import TableIOManager
from assets.partitions import crawl_key, release_partitions
from assets.resources import LookbenchConfig
from lookbench_pipeline import quality, schemas
from lookbench_pipeline.config import ConfigError, load_config
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.releases import list_releases


def test_schema_mismatches():
    t = schemas.from_rows([{"site": "a", "url": "u", "stored_path": None, "reason": "x"}], schemas.IMAGE_DOWNLOADS)
    assert quality.schema_mismatches(t, schemas.IMAGE_DOWNLOADS) == []
    assert quality.schema_mismatches(t.drop(["reason"]), schemas.IMAGE_DOWNLOADS) == ["missing column reason"]
    bad = t.set_column(0, "site", pa.array([1], pa.int64()))
    assert quality.schema_mismatches(bad, schemas.IMAGE_DOWNLOADS) == ["column site: int64 instead of string"]
    assert quality.schema_mismatches(t.append_column("extra", pa.array([1])), schemas.IMAGE_DOWNLOADS) == [
        "extra column extra"]
    assert "column order" in quality.schema_mismatches(t.select(["url", "site", "stored_path", "reason"]),
                                                       schemas.IMAGE_DOWNLOADS)[0]
    # a list read back from Parquet names its child "element": the same type
    lst = pa.table({"x": pa.array([["a"]], pa.list_(pa.field("element", pa.string())))})
    assert quality.schema_mismatches(lst, pa.schema([("x", pa.list_(pa.string()))])) == []


def test_rates_and_counts():
    refs = pa.table({"status": ["accepted", "rejected", "rejected", "accepted"],
                     "reason": [None, "truncated", "too_small", None]})
    assert quality.status_rate(refs) == (0.5, {"too_small": 1, "truncated": 1})
    assert quality.ratio(1, 0) == 0.0
    images = pa.table({"image_sha256": ["a", "b", "c", "d"]})
    cont = pa.table({"image_sha256": ["a", "a", "b"], "source": ["f200k", "deepfashion", "f200k"]})
    assert quality.contamination_rate(images, cont) == (0.5, {"deepfashion": 1, "f200k": 2})
    assert quality.near_duplicate_rate(pa.table({"is_representative": [True, False, True, True]})) == 0.25
    assert quality.duplicates(pa.table({"id": ["x", "y", "x"]}), "id") == ["x"]
    files = {"s/query.parquet": {"rows": 3}, "s/gallery.parquet": {"rows": 9}}
    assert quality.per_subset_rows(files) == {"s": {"query": 3, "gallery": 9}}
    scores = pa.table({"model": ["m", "m"], "subset": ["s", "s"], "metric": ["r@1", "r@5"], "value": [0.5, 1.2],
                       "ci_low": [0.6, 1.0], "ci_high": [0.7, 1.3]})
    assert quality.score_problems(scores) == ["m/s/r@1: 0.5 outside [0.6, 0.7]", "m/s/r@5: value 1.2"]
    ir = pa.table({"ref_id": ["1", "2", "3"], "status": ["accepted", "rejected", "accepted"],
                   "reason": [None, None, None], "image_sha256": ["a", None, None]})
    assert quality.image_refs_problems(ir) == ["2: rejected without a reason", "3: accepted without sha256 or "
                                                                               "with a reason"]


def test_the_page_rejection_rate_counts_no_redirect():
    """A ``redirected`` crawl-log row (a URL that redirected within the site: its target has its own row) is no
    page: ``weekly_crawl_log/page_rejection_rate`` counts it neither as a rejection nor among the pages, so a site
    whose alias URLs redirect to its pages is neither flagged nor made to look better for it."""
    from dagster import build_asset_check_context

    from assets.checks import page_rejection_rate

    rows = [{"site": "s", "url": f"/alias/{i}", "status": 301, "outcome": "redirected", "reason": None}
            for i in range(6)]
    rows += [{"site": "s", "url": "/p/1", "status": 200, "outcome": "product", "reason": None},
             {"site": "s", "url": "/p/2", "status": 200, "outcome": "look", "reason": None},
             {"site": "s", "url": "/gone", "status": 404, "outcome": "rejected", "reason": "http_404"}]
    table = schemas.from_rows(rows, schemas.CRAWL_LOG)
    result = page_rejection_rate(build_asset_check_context(), LookbenchConfig(), table)
    md = {k: v.value for k, v in result.metadata.items()}
    assert result.passed and md["fetched"] == 3 and md["rate"] == pytest.approx(1 / 3)
    assert md["failed_by_reason"] == {"http_404": 1}
    assert (md["pages"], md["kept"], md["redirected"], md["rejected"]) == (9, 2, 6, 1)  # as the crawl line


def test_the_page_rejection_rate_counts_no_url_the_page_cap_cut():
    """``max_pages: 2`` on a site of many URLs: the rows ``max_pages_reached`` (never fetched: the site's own cap) are
    no failure of the site, so ``weekly_crawl_log/page_rejection_rate`` leaves them out of both terms (it warned
    rate≈0.99 for 39 failed of 51 fetched); its metadata names the crawl line's numbers (pages = every row, kept,
    redirected, rejected) and the cut ones apart."""
    from dagster import build_asset_check_context

    from assets.checks import page_rejection_rate
    from assets.crawl import crawl_headline
    from lookbench_pipeline.crawl_tables import log_counts

    rows = [{"site": "s", "url": f"/cut/{i}", "status": 0, "outcome": "rejected", "reason": "max_pages_reached"}
            for i in range(100)]
    rows += [{"site": "s", "url": "/alias", "status": 301, "outcome": "redirected", "reason": None},
             {"site": "s", "url": "/p/1", "status": 200, "outcome": "product", "reason": None},
             {"site": "s", "url": "/p/2", "status": 200, "outcome": "product", "reason": None},
             {"site": "s", "url": "/p/3", "status": 200, "outcome": "product", "reason": None},
             {"site": "s", "url": "/gone", "status": 404, "outcome": "rejected", "reason": "http_404"}]
    table = schemas.from_rows(rows, schemas.CRAWL_LOG)
    result = page_rejection_rate(build_asset_check_context(), LookbenchConfig(), table)
    md = {k: v.value for k, v in result.metadata.items()}
    assert md["rate"] == pytest.approx(1 / 4) and (md["failed"], md["fetched"]) == (1, 4) and result.passed
    assert md["not_fetched_max_pages"] == 100 and md["failed_by_reason"] == {"http_404": 1}
    line = crawl_headline(log_counts(table))
    assert line.startswith("pages 105 (kept 3, redirected 1, rejected 101 (")
    assert (md["pages"], md["kept"], md["redirected"], md["rejected"]) == (105, 3, 1, 101)


def test_check_thresholds_are_validated(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({"checks": {"max_contamination_rte": 0.1}}))
    with pytest.raises(ConfigError, match="max_contamination_rte"):
        load_config(p)
    p.write_text(yaml.safe_dump({"checks": {"severity": {"contamination_rate": "fatal"}}}))
    with pytest.raises(ConfigError):
        load_config(p)


def _config(tmp_path, name, checks):
    site = yaml.safe_load(open("lookbench_pipeline/data/sites/demo.yaml"))
    site.update(demo_products=12, demo_looks=3)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"data_dir": "data", "store": {"url": "store"}, "sites": ["demo.yaml"],
                                 "checks": checks}))
    return p


def _resources(cfg):
    return {"lookbench": LookbenchConfig(config_path=str(cfg)), "io_manager": TableIOManager(config_path=str(cfg))}


def _check_results(result):
    return {(e.asset_check_evaluation_data.asset_key.to_user_string(), e.asset_check_evaluation_data.check_name):
            e.asset_check_evaluation_data for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_a_bad_value_stops_the_publish_step_unless_it_is_a_warning(tmp_path):
    """The demo's legacy benchmark leaks images into the shop: with a contamination-rate limit of 0 the blocking
    check fails with ERROR and nothing is published; configured as a warning, it is recorded and the run goes on."""
    strict = _config(tmp_path, "strict", {"max_contamination_rate": 0.0})
    lenient = _config(tmp_path, "lenient", {"max_contamination_rate": 0.0,
                                           "severity": {"contamination_rate": "warn"}})
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sites", ["demo"])
    window = release_partitions.get_last_partition_key()  # the open window: a crawl now belongs to it
    assets = [*ALL_ASSETS, *ALL_CHECKS]
    assert materialize(assets, selection=CRAWL_SELECTION, partition_key=crawl_key(window, "demo"),
                       instance=instance, resources=_resources(strict)).success

    r = materialize(assets, selection=AssetSelection.all() - CRAWL_SELECTION, partition_key=window,
                    instance=instance, resources=_resources(strict), raise_on_error=False)
    assert not r.success
    ev = _check_results(r)[("contamination", "contamination_rate")]
    assert not ev.passed and ev.severity.value == "ERROR" and ev.metadata["rate"].value > 0
    done = {e.asset_key.to_user_string() for e in r.get_asset_materialization_events()}
    assert "contamination" in done and not {"release_candidate", "release", "evaluation"} & done
    assert list_releases(store_of(load_config(strict))) == []
    # what `lookbench build` prints for it: the check, its measured rate and its bound, not just its name
    from assets.runner import RunFailed, _check

    with pytest.raises(RunFailed) as exc:
        _check(r)
    [line] = [ln for ln in str(exc.value).splitlines() if ln.startswith("check contamination/contamination_rate")]
    assert "failed (ERROR)" in line and "rate=" in line and "max=0.0" in line, line

    r = materialize(assets, selection=AssetSelection.all() - CRAWL_SELECTION, partition_key=window,
                    instance=instance, resources=_resources(lenient))
    assert r.success
    ev = _check_results(r)[("contamination", "contamination_rate")]
    assert not ev.passed and ev.severity.value == "WARN"
    assert len(list_releases(store_of(load_config(lenient)))) == 1


def test_an_interrupted_step_says_to_run_the_command_again():
    """Ctrl-C (SIGINT) or SIGTERM during a step: the build's error says how to go on, not Dagster's exception name."""
    from dagster import Definitions, asset, define_asset_job
    from dagster._core.errors import DagsterExecutionInterruptedError

    from assets.runner import RunFailed, _check

    @asset
    def crawl():
        raise DagsterExecutionInterruptedError()

    job = Definitions(assets=[crawl], jobs=[define_asset_job("j")]).resolve_job_def("j")
    result = job.execute_in_process(instance=DagsterInstance.ephemeral(), raise_on_error=False)
    with pytest.raises(RunFailed) as exc:
        _check(result)
    assert str(exc.value) == ("step crawl was interrupted: run the same command again to go on (a crawl continues "
                              "where it stopped)")


def test_a_release_without_queries_says_why():
    """A shop with no looks: ``release_candidate/has_queries`` fails with why — the crawl found no look (the site's
    look_rules matched nothing), no drop supplies query images — and every rejection by kind and reason."""
    from datetime import datetime, timezone

    from lookbench_pipeline.releases.build import why_no_queries
    from lookbench_pipeline.releases.candidate import ReleaseTables
    from lookbench_pipeline.windows import Window

    t0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
    rel = ReleaseTables("v", Window(t0, t0), {}, rejected=[
        {"candidate": "product_image", "id": f"r{i}", "reason": "not_labelled", "source": None} for i in range(3)]
        + [{"candidate": "query", "id": "q", "reason": "no_positive_in_gallery", "source": None}])
    why = why_no_queries(rel, looks=schemas.empty(schemas.LOOKS), drop_items=schemas.empty(schemas.DROP_ITEMS),
                         look_rules={"shop": ("img.look-image::attr(src)", "a.look-product::attr(href)")})
    assert "found 0 looks" in why and "img.look-image::attr(src) / a.look-product::attr(href)" in why
    assert "no image drop supplies query images" in why
    assert "product_image 3 (not_labelled 3), query 1 (no_positive_in_gallery 1)" in why
    looks = schemas.from_rows([{"look_id": "l", "site": "shop", "url": "u", "image_url": "i",
                                "product_urls": ["a", "b"], "product_ids": ["a"],
                                "crawled_at": t0, "first_seen_at": t0}], schemas.LOOKS)
    rel.rejected = [{"candidate": "look_item", "id": "l#a", "reason": "not_labelled", "source": None},
                    {"candidate": "look_item", "id": "l#u0", "reason": "linked_product_not_crawled", "source": None}]
    why = why_no_queries(rel, looks=looks, drop_items=schemas.empty(schemas.DROP_ITEMS))
    assert "looks 1" in why and "0 looks" not in why
    assert "look_item 2 (linked_product_not_crawled 1, not_labelled 1)" in why


def test_the_release_candidate_of_a_shop_without_looks_fails_has_queries_saying_why(demo_config, monkeypatch):
    """The asset: a window with no look, no drop and no product with a second picture fails ``has_queries`` with
    the explanation in its metadata (what ``lookbench build`` prints) and description."""
    from dagster import build_asset_context

    from assets.release import release_candidate

    monkeypatch.chdir(demo_config.parent)
    empty = {name: schemas.empty(schemas.TABLES[name]) for name in (
        "products", "looks", "drop_items", "image_refs", "images", "image_clusters", "annotations", "contamination",
        "negatives", "generated_checks", "detections")}
    key = release_partitions.get_last_partition_key()
    with build_asset_context(partition_key=key) as ctx:
        results = list(release_candidate(ctx, lookbench=LookbenchConfig(config_path=str(demo_config)),
                                         detector={}, **empty))
    [hq] = [r for r in results if getattr(r, "check_name", None) == "has_queries"]
    why = hq.metadata["why"].value if hasattr(hq.metadata["why"], "value") else hq.metadata["why"]
    assert not hq.passed and "found 0 looks" in why and "demo: img.look-image::attr(src)" in why
    assert hq.description == why
