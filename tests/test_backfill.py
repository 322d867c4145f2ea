"""Backfill: a release window rebuilt from the crawl archive alone (WARC files in the object store), with the
network disabled, gives byte-identical release files."""

import shutil
import socket

import pytest
import yaml
from dagster import DagsterInstance

from assets.runner import rebuild_window, run_release
from lookbench_pipeline import crawl as crawl_mod
from lookbench_pipeline.backfill import archived_crawls
from lookbench_pipeline.config import load_config
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.warc import read_warcinfo


def _config(tmp_path, name):
    site = yaml.safe_load(open("lookbench_pipeline/data/sites/demo.yaml"))
    site.update(demo_products=12, demo_looks=3)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"data_dir": f"{name}-data", "store": {"url": f"{name}-store"},
                                 "sites": ["demo.yaml"]}))
    return p


@pytest.fixture
def no_network(monkeypatch):
    """Refuse every socket connection in this process except to the local Unix domain, and refuse to start the
    demo shop's server (the spider child process gets the no-network download handler of a replay)."""
    real_connect = socket.socket.connect

    def guarded(self, address):
        if self.family != socket.AF_UNIX:
            raise OSError(f"network disabled in this test: connect to {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setattr(crawl_mod, "run_spider", _spider_only_for_replay(crawl_mod.run_spider))

    def no_server(*a, **k):
        raise AssertionError("the demo shop must not be served during a rebuild")

    from lookbench_pipeline import serve
    monkeypatch.setattr(serve, "serving", no_server)


def _spider_only_for_replay(run_spider):
    def wrapped(*a, extra_settings=None, **k):
        assert extra_settings and extra_settings.get("LOOKBENCH_REPLAY_WARC"), "a live crawl during a rebuild"
        return run_spider(*a, extra_settings=extra_settings, **k)
    return wrapped


def test_rebuild_a_window_from_the_archive_gives_identical_files(tmp_path, request):
    live_cfg = _config(tmp_path, "live")
    live = run_release(str(live_cfg), instance=DagsterInstance.ephemeral())
    m1 = live["manifest"]
    store1 = store_of(load_config(live_cfg))
    [archived] = archived_crawls(store1, "demo")
    assert archived.week and archived.base_url.startswith("http://127.0.0.1:")

    # a fresh environment that has only the archive: the WARC files and their descriptions, and the stored
    # generated images with their generation record (AI-generated subsets are generated, not crawled: their
    # images and first_seen_at come from that record, docs/DEPLOY.md)
    rebuilt_cfg = _config(tmp_path, "rebuilt")
    shutil.copytree(tmp_path / "live-store" / "warc", tmp_path / "rebuilt-store" / "warc")
    _restore_generation_record(tmp_path / "live-data", tmp_path / "rebuilt-data")
    request.getfixturevalue("no_network")
    rebuilt = rebuild_window(str(rebuilt_cfg), live["window"], instance=DagsterInstance.ephemeral())
    m2 = rebuilt["manifest"]

    assert rebuilt["replayed"] == {"demo": [archived.key]}
    assert m2["version"] == m1["version"] and m2["window"] == m1["window"]
    assert m2["files"] == m1["files"], "every release file byte-identical (sha256)"
    assert _counts(m2) == _counts(m1)
    store2 = store_of(load_config(rebuilt_cfg))
    for key in m1["files"]:
        assert store2.get_bytes(f"releases/{m2['version']}/{key}") == store1.get_bytes(f"releases/{m1['version']}/{key}")
    # the replay answered every request from the archive and nothing else
    stats = _replay_stats(tmp_path / "rebuilt-data")
    assert stats.get("lookbench/replay/served", 0) > 0
    assert not stats.get("lookbench/replay/network_attempts")


def _counts(manifest):
    """The manifest's counts; a generation that failed is tried again by any rebuild, so only that it failed
    counts, not how (the live demo's scripted generator answers one request with a 500, the rebuild cannot reach
    it)."""
    c = dict(manifest["counts"])
    reasons: dict[str, int] = {}
    for k, v in c.get("rejected_by_reason", {}).items():
        k = "generation_failed" if k.startswith("generation_failed:") else k
        reasons[k] = reasons.get(k, 0) + v
    c["rejected_by_reason"] = reasons
    return c


def _restore_generation_record(src, dst):
    """Copy ``<data_dir>/aigen`` (generated images and one JSON record per request) to another data_dir, pointing
    the records at the copied images: what restoring it from backup does."""
    import json

    if not (src / "aigen").is_dir():
        return
    shutil.copytree(src / "aigen", dst / "aigen")
    for rec_path in (dst / "aigen").rglob("*.json"):
        rec = json.loads(rec_path.read_text())
        if isinstance(rec, dict) and "path" in rec:
            rec["path"] = rec["path"].replace(str(src.resolve()), str(dst.resolve()))
            rec_path.write_text(json.dumps(rec, indent=1, sort_keys=True))


def _replay_stats(data_dir):
    import json

    [stats] = list(data_dir.glob("runs/*/*/demo/crawl/stats.json"))
    return json.loads(stats.read_text())


def test_archived_warc_starts_with_its_description(tmp_path):
    from lookbench_pipeline.warc import warcinfo_record

    p = tmp_path / "x.warc.gz"
    p.write_bytes(warcinfo_record({"site": "demo", "base-url": "http://127.0.0.1:8", "week": "2026-11-30",
                                   "started-at": "2026-11-30T10:00:00.000001Z"}))
    assert read_warcinfo(p) == {"site": "demo", "base-url": "http://127.0.0.1:8", "week": "2026-11-30",
                                "started-at": "2026-11-30T10:00:00.000001Z"}


def test_rebuild_refuses_a_used_state(tmp_path):
    cfg = _config(tmp_path, "used")
    (tmp_path / "used-data" / "state" / "demo").mkdir(parents=True)
    with pytest.raises(ValueError, match="fresh data_dir"):
        rebuild_window(str(cfg), "2026-07-01", instance=DagsterInstance.ephemeral())
