"""Backfill: a release window rebuilt from the store alone (the crawl archive's WARC files and the rebuild records
beside them: first-seen times of image-drop files, AI-generation results), into an empty data_dir with the network
disabled, gives byte-identical release files. Corrupt or hostile archives and records are refused by name."""

import io
import json
import shutil
import socket

import pyarrow.parquet as pq
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
    _photo_drop(tmp_path / "photos")
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"data_dir": f"{name}-data", "store": {"url": f"{name}-store"},
                                 "sites": ["demo.yaml"],
                                 "drops": [{"name": "photos", "path": "photos",
                                            "subfolders": {"query": "real_studio_flat:query",
                                                           "gallery": "real_studio_flat:gallery"}}]}))
    return p


def _photo_drop(root):
    """An image drop (read in place by both builds): two items, each a query and a gallery photo, with titles."""
    import numpy as np
    from PIL import Image

    if root.exists():
        return
    rows = ["path,item_id,role,subset,title,description"]
    for i, (colour, title) in enumerate([((200, 30, 40), "red cotton dress"), ((30, 40, 190), "blue denim jeans")]):
        for role in ("query", "gallery"):
            (root / role).mkdir(parents=True, exist_ok=True)
            rng = np.random.default_rng(100 * i + len(role))
            px = np.clip(np.array(colour) + rng.integers(-40, 40, (400, 320, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(px).save(root / role / f"item{i}.jpg", quality=90)
            rows.append(f"{role}/item{i}.jpg,photo-{i},{role},real_studio_flat,{title},")
    (root / "items.csv").write_text("\n".join(rows) + "\n")


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

    from lookbench_pipeline.demo import serve
    monkeypatch.setattr(serve, "serving", no_server)


def _spider_only_for_replay(run_spider):
    def wrapped(*a, extra_settings=None, **k):
        assert extra_settings and extra_settings.get("LOOKBENCH_REPLAY_WARC"), "a live crawl during a rebuild"
        return run_spider(*a, extra_settings=extra_settings, **k)
    return wrapped


def test_rebuild_a_window_from_the_store_alone_gives_identical_files(tmp_path, request, monkeypatch):
    live_cfg = _config(tmp_path, "live")
    live = run_release(str(live_cfg), instance=DagsterInstance.ephemeral())
    m1 = live["manifest"]
    store1 = store_of(load_config(live_cfg))
    [archived] = archived_crawls(store1, "demo")
    assert archived.week and archived.base_url.startswith("http://127.0.0.1:") and archived.sha256
    [qkey] = [k for k in m1["files"] if k.endswith("real_studio_flat/query.parquet")]
    sites = pq.read_table(io.BytesIO(store1.get_bytes(f"releases/{m1['version']}/{qkey}")), columns=["site"])
    assert "drop:photos" in sites["site"].to_pylist(), "the drop's photos are in the release"
    assert list(store1.list("records/drops/photos/")) and list(store1.list("records/aigen/images/"))

    # a fresh environment: an empty data_dir, and a store that holds only the crawl archive (warc/) and the rebuild
    # records beside it (records/: first-seen times of drop files, generation results and their images)
    rebuilt_cfg = _config(tmp_path, "rebuilt")
    for prefix in ("warc", "records"):
        shutil.copytree(tmp_path / "live-store" / prefix, tmp_path / "rebuilt-store" / prefix)
    assert not (tmp_path / "rebuilt-data").exists()
    request.getfixturevalue("no_network")
    # nothing of the tests' shared cache either: the rebuild trains the demo detector again in its own data_dir, in
    # another folder than the live build's, as a backfill on a fresh machine does
    monkeypatch.delenv("LOOKBENCH_DETECT__CACHE_DIR", raising=False)
    rebuilt = rebuild_window(str(rebuilt_cfg), live["window"], instance=DagsterInstance.ephemeral())
    m2 = rebuilt["manifest"]
    assert list((tmp_path / "rebuilt-data" / "detector").glob("demo-*/detector.pt")), "the rebuild trained its own"
    # another file (ultralytics dates the checkpoint), the same weights: the provenance names the same detector
    [d1], [d2] = ([m for m in m["models"] if m["role"] == "detector"] for m in (m1, m2))
    assert d2["weights_sha256"] == d1["weights_sha256"] and d2["weights_sha256_of"] == "tensors"

    assert rebuilt["replayed"] == {"demo": [archived.key]}
    assert m2["version"] == m1["version"] and m2["window"] == m1["window"]
    store2 = store_of(load_config(rebuilt_cfg))
    assert m2["files"] == m1["files"], ("every release file byte-identical (sha256); where they differ: "
                                        + _differences(store1, store2, m1, m2))
    assert _counts(m2) == _counts(m1)
    for key in m1["files"]:
        assert store2.get_bytes(f"releases/{m2['version']}/{key}") == store1.get_bytes(f"releases/{m1['version']}/{key}")
    # the replay answered every request from the archive and nothing else
    stats = _replay_stats(tmp_path / "rebuilt-data")
    assert stats.get("lookbench/replay/served", 0) > 0
    assert not stats.get("lookbench/replay/network_attempts")
    # nothing was generated or first seen again: generated images and drop files came from the store's records
    assert sorted(store2.list("records/")) == sorted(store1.list("records/"))


def _differences(store1, store2, m1, m2) -> str:
    """Which columns (and first rows) of the differing release files differ: what a failure needs to be traced."""
    out = []
    for key in sorted(set(m1["files"]) | set(m2["files"])):
        if m1["files"].get(key) == m2["files"].get(key):
            continue
        try:
            a = pq.read_table(io.BytesIO(store1.get_bytes(f"releases/{m1['version']}/{key}"))).to_pylist()
            b = pq.read_table(io.BytesIO(store2.get_bytes(f"releases/{m2['version']}/{key}"))).to_pylist()
        except Exception as exc:  # a file missing on one side
            out.append(f"{key}: {exc!r}")
            continue
        cols = sorted({c for ra, rb in zip(a, b) for c in ra if ra.get(c) != rb.get(c)})
        rows = [i for i, (ra, rb) in enumerate(zip(a, b)) if ra != rb][:3]
        detail = [(c, a[i].get(c) if c != "image" else "<bytes>", b[i].get(c) if c != "image" else "<bytes>")
                  for i in rows for c in cols]
        out.append(f"{key}: rows {len(a)} vs {len(b)}, columns {cols}, first differing rows {rows}: {detail!r:.1500}")
    return "; ".join(out)


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


def _drop_cfg(tmp_path):
    from lookbench_pipeline.config import DropConfig

    _photo_drop(tmp_path / "photos")
    return DropConfig(name="photos", path=tmp_path / "photos",
                      subfolders={"query": "real_studio_flat:query", "gallery": "real_studio_flat:gallery"})


def test_drop_first_seen_comes_back_from_the_store(tmp_path):
    """A drop scanned into one data_dir and scanned again into an empty one with the same store: every file keeps
    its first time; a file added later gets the later time, and only it is recorded again."""
    from datetime import datetime, timedelta, timezone

    from lookbench_pipeline import drops
    from lookbench_pipeline.store import LocalStore

    store, drop = LocalStore(tmp_path / "store"), _drop_cfg(tmp_path)
    t0 = datetime(2026, 7, 3, 10, 0, 0, 123456, tzinfo=timezone.utc)
    first = drops.scan(drop, tmp_path / "a" / "state", t0, store)
    assert len(list(store.list("records/drops/photos/"))) == 1
    shutil.copy(tmp_path / "photos/query/item0.jpg", tmp_path / "photos/query/item9.jpg")
    again = drops.scan(drop, tmp_path / "b" / "state", t0 + timedelta(days=9), store)
    seen = dict(zip(again["path"].to_pylist(), again["first_seen_at"].to_pylist()))
    assert {p: seen[p] for p in first["path"].to_pylist()} == dict(zip(first["path"].to_pylist(),
                                                                      first["first_seen_at"].to_pylist()))
    assert seen[str((tmp_path / "photos/query/item9.jpg").resolve())] == t0 + timedelta(days=9)
    assert len(list(store.list("records/drops/photos/"))) == 2


def _records_store(tmp_path):
    from datetime import datetime, timezone

    from lookbench_pipeline import drops, records
    from lookbench_pipeline.store import LocalStore

    store = LocalStore(tmp_path / "store")
    drops.scan(_drop_cfg(tmp_path), tmp_path / "state", datetime(2026, 7, 3, tzinfo=timezone.utc), store)
    records.write_generation(store, "ab" * 12, {"backend": "endpoint", "generator_model": "m",
                                                "generator_version": "1", "seed": 7, "prompt": "p", "ext": ".png",
                                                "first_seen_at": datetime(2026, 7, 4, tzinfo=timezone.utc)},
                             b"\x89PNG generated bytes")
    return store


def _rewrite(store, key, change):
    """Replace a record by a changed one stored under the key its new bytes hash to (a well-formed forgery), or,
    with ``change=None``, flip a byte in place (corruption)."""
    from lookbench_pipeline.store import sha256_hex

    data = store.get_bytes(key)
    if change is None:
        store.put_bytes(key, data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])
        return
    obj = json.loads(data)
    change(obj)
    new = json.dumps(obj).encode()
    store.delete(key)
    store.put_bytes(f"{key.rsplit('/', 1)[0]}/{sha256_hex(new)}.json", new)


@pytest.mark.parametrize("what,change,match", [
    ("drop", None, "corrupt or was replaced"),
    ("drop", lambda o: o["items"][0].update(path="../../etc/passwd"), "is not the id of that path"),
    ("drop", lambda o: o["items"][0].update(first_seen_at="2026-07-03T00:00:00"), "no time zone"),
    ("drop", lambda o: o["items"][0].update(first_seen_at=["x"]), "not a date-time"),
    ("drop", lambda o: o.update(drop="other"), "a record of drop 'other'"),
    ("drop", lambda o: o.update(items={"a": 1}), "'items' is not a list"),
    ("drop", lambda o: o.update(record="aigen_result"), "not a drop_first_seen record"),
    ("aigen", None, "corrupt or was replaced"),
    ("aigen", lambda o: o.update(ext="/../../x"), "not a file suffix"),
    ("aigen", lambda o: o.update(seed="7; rm"), "seed is not an integer"),
    ("aigen", lambda o: o.update(request_id="cd" * 12), "not 'abab"),
])
def test_corrupt_or_hostile_records_are_refused(tmp_path, what, change, match):
    from lookbench_pipeline import drops, records

    store = _records_store(tmp_path)
    prefix = "records/drops/photos/" if what == "drop" else "records/aigen/results/" + "ab" * 12 + "/"
    [key] = list(store.list(prefix))
    _rewrite(store, key, change)
    with pytest.raises(records.RecordError, match=match):
        if what == "drop":
            from datetime import datetime, timezone

            drops.scan(_drop_cfg(tmp_path), tmp_path / "fresh", datetime.now(timezone.utc), store)
        else:
            records.read_generation(store, "ab" * 12)


def test_a_replaced_generated_image_or_a_stray_key_is_refused(tmp_path):
    from lookbench_pipeline import records

    store = _records_store(tmp_path)
    rec, image = records.read_generation(store, "ab" * 12)
    assert image == b"\x89PNG generated bytes" and rec["seed"] == 7
    store.put_bytes(records.image_key(rec["image_sha256"]), b"another picture")
    with pytest.raises(records.RecordError, match="the image is corrupt or was replaced"):
        records.read_generation(store, "ab" * 12)
    store.put_bytes("records/drops/photos/evil.json", b"{}")
    with pytest.raises(records.RecordError, match="not a rebuild record key"):
        records.read_drop_first_seen(store, "photos")


def test_a_corrupt_archive_is_refused(tmp_path):
    from lookbench_pipeline.backfill import ArchiveError, ArchivedCrawl, fetch
    from lookbench_pipeline.store import LocalStore, sha256_hex
    from lookbench_pipeline.warc import warcinfo_record

    store = LocalStore(tmp_path / "store")
    data = warcinfo_record({"site": "demo", "started-at": "2026-11-30T10:00:00.000001Z"})
    store.put_bytes("warc/demo/r1.warc.gz", data)
    store.put_bytes("warc/demo/r1.json", json.dumps({"site": "demo", "run-id": "r1", "sha256": sha256_hex(data),
                                                     "started-at": "2026-11-30T10:00:00.000001Z"}).encode())
    [a] = archived_crawls(store, "demo")
    assert fetch(store, a, tmp_path / "x").read_bytes() == data
    store.put_bytes("warc/demo/r1.warc.gz", data + b"tampered")
    with pytest.raises(ArchiveError, match="corrupt or was replaced"):
        fetch(store, a, tmp_path / "y")
    store.put_bytes("warc/demo/r1.json", b"[1]")
    with pytest.raises(ArchiveError, match="not a crawl description"):
        archived_crawls(store, "demo")
