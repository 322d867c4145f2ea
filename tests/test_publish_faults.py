"""Publishing under faults: a run killed at every write leaves the old or the new state; a real S3-compatible server
(moto) behind a fault-injecting proxy (tests/fault_proxy.py) with 5xx errors and a server that stops mid-upload."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import boto3
import pytest
from fault_proxy import FaultProxy
from release_factory import make_release

from lookbench_pipeline.releases import ReleaseIntegrityError, all_files, list_releases, pull, read_manifest
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.releases.publishing import STAGING_ROOT
from lookbench_pipeline.store import LocalStore, S3Store, StoreError

V1, V2 = "v20260301", "v20260701"


class Killed(BaseException):
    """The process died (not an Exception: nothing may catch it)."""


class KilledAfter(LocalStore):
    """A LocalStore whose process dies before its ``n``-th write (put, put_new, copy, delete)."""

    def __init__(self, root: Path, n: int):
        super().__init__(root)
        self.n, self.writes = n, 0

    def _tick(self):
        self.writes += 1
        if self.writes >= self.n:
            raise Killed(f"killed before write {self.writes}")

    def put_bytes(self, key, data, content_type=None):
        self._tick()
        super().put_bytes(key, data, content_type)

    def put_new(self, key, data, content_type=None):
        self._tick()
        super().put_new(key, data, content_type)

    def copy(self, src, dst):
        self._tick()
        super().copy(src, dst)

    def delete(self, key):
        self._tick()
        super().delete(key)


def _latest(store) -> str:
    return store.get_bytes("releases/latest").decode()


def _verify_every_byte(store, version: str) -> dict:
    m = read_manifest(store, version)
    for key, meta in all_files(m).items():
        data = store.get_bytes(f"releases/{version}/{key}")
        assert len(data) == meta["bytes"] and hashlib.sha256(data).hexdigest() == meta["sha256"], key
    return m


def _assert_old_or_new(store, old: list[str], new_version: str) -> str:
    """A reader sees the old releases, or the old ones plus the complete new one; never a partial version."""
    versions = list_releases(store)
    if versions == old:
        assert _latest(store) == old[-1]
        for v in old:
            _verify_every_byte(store, v)
        return "old"
    assert versions == [*old, new_version]
    _verify_every_byte(store, new_version)
    return "new"


def test_killed_at_every_write_leaves_old_or_new_state_and_a_rerun_completes(tmp_path):
    rel1 = make_release(V1, range(0, 4), street_every=0)
    rel2 = make_release(V2, range(2, 6), street_every=0)
    base = tmp_path / "base"
    publish(rel1, LocalStore(base), {})
    # how many writes a whole publish of rel2 makes
    probe_root = tmp_path / "probe"
    shutil.copytree(base, probe_root)
    probe = KilledAfter(probe_root, 10**9)
    reference = publish(rel2, probe, {})
    total = probe.writes
    assert total >= 2 * len(all_files(reference)) + 2  # staged + moved files, manifest, latest (+ clean-up)
    seen = set()
    for n in range(1, total + 1):
        root = tmp_path / f"kill{n}"
        shutil.copytree(base, root)
        with pytest.raises(Killed):
            publish(rel2, KilledAfter(root, n), {})
        seen.add(_assert_old_or_new(LocalStore(root), [V1], V2))
        # the rerun completes: the version, latest, and no staging left over
        m = publish(rel2, LocalStore(root), {})
        store = LocalStore(root)
        assert list_releases(store) == [V1, V2] and _latest(store) == V2
        assert not list(store.list(STAGING_ROOT + "/")), f"staging left after a kill at write {n}"
        assert not (root / STAGING_ROOT).exists(), "empty staging folders left behind"
        assert all_files(_verify_every_byte(store, V2)) == all_files(reference)
        assert all_files(m) == all_files(reference)
    assert seen == {"old", "new"}  # kills before and after the manifest were both exercised


def _bucket(endpoint: str, name: str) -> None:
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)


def _uploads(store: S3Store) -> list:
    return store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])


def _publish_until_done(rel, store, direct, old: list[str], attempts: int = 5) -> dict:
    """Publish, rerunning after a failure; after each failure a reader must still see the old state."""
    for _ in range(attempts):
        try:
            return publish(rel, store, {})
        except (StoreError, ReleaseIntegrityError):
            assert _assert_old_or_new(direct, old, rel.version) in ("old", "new")
    raise AssertionError(f"publish did not finish in {attempts} runs")


def test_s3_publish_through_injected_5xx_with_multipart(s3_server, s3_env):
    _bucket(s3_server, "faults-5xx")
    direct = S3Store("s3://faults-5xx/lb", endpoint_url=s3_server)
    publish(make_release(V1, range(0, 6)), direct, {})
    # a gallery of 24 pictures of ~240 kB: above 5 MiB, so two parts (S3's smallest part is 5 MiB)
    big = make_release(V2, range(4, 28), gallery_px=512, street_every=0)
    proxy = FaultProxy(s3_server, error_rate=0.2, after_rate=0.03, seed=7)
    try:
        store = S3Store("s3://faults-5xx/lb", endpoint_url=proxy.url, multipart_threshold=256 * 1024,
                        multipart_chunksize=5 * 1024 * 1024, max_attempts=10)
        m = _publish_until_done(big, store, direct, [V1])
    finally:
        proxy.close()
    assert proxy.injected > 0, "the proxy injected no fault: the test would prove nothing"
    assert list_releases(direct) == [V1, V2] and _latest(direct) == V2
    _verify_every_byte(direct, V2)
    assert not list(direct.list(STAGING_ROOT + "/")) and not _uploads(direct)
    # multipart happened: the gallery was staged in >= 2 parts, and its ETag is not an MD5 of the bytes
    parts = {re.search(r"partNumber=(\d+)", s.path).group(1) for s in proxy.seen
             if s.method == "PUT" and "partNumber=" in s.path and "real_studio_flat/gallery.parquet" in s.path}
    assert len(parts) >= 2, parts
    assert m["files"]["real_studio_flat/gallery.parquet"]["bytes"] > 5 * 1024 * 1024
    etag = direct.client.head_object(Bucket="faults-5xx", Key=f"lb/releases/{V2}/real_studio_flat/gallery.parquet")
    assert "-" in etag["ETag"]
    # when_required: no request carried a checksum header or an aws-chunked trailer
    assert all(not s.headers for s in proxy.seen), [s.headers for s in proxy.seen if s.headers][:3]


def test_s3_server_stopped_mid_upload_then_rerun(s3_server, s3_env, tmp_path):
    _bucket(s3_server, "faults-stop")
    direct = S3Store("s3://faults-stop/lb", endpoint_url=s3_server)
    publish(make_release(V1, range(0, 6)), direct, {})
    rel2 = make_release(V2, range(4, 20))
    # files above 16 kB go up as multipart uploads; the server dies after 60 kB of request bodies, which is in
    # the middle of staging the data files
    opts = {"multipart_threshold": 16 * 1024, "multipart_chunksize": 5 * 1024 * 1024}
    proxy = FaultProxy(s3_server, stop_after_upload_bytes=60 * 1024)
    try:
        store = S3Store("s3://faults-stop/lb", endpoint_url=proxy.url, max_attempts=2, **opts)
        with pytest.raises(StoreError):
            publish(rel2, store, {})
    finally:
        proxy.close()
    assert proxy.stopped.is_set() and any(s.status == 0 for s in proxy.seen), "the upload was not cut"
    assert any("uploadId=" in s.path for s in proxy.seen), "no multipart upload was under way"
    # nothing partial is visible: the old release only, still whole
    assert _assert_old_or_new(direct, [V1], V2) == "old"
    assert pull(direct, V1, tmp_path / "pulled", progress=False)
    leftovers = list(direct.list(STAGING_ROOT + "/")) + _uploads(direct)
    assert leftovers, "the run was cut before it staged anything: the test would prove nothing"
    # the rerun (through a proxy that still throws 5xx) finishes and cleans up
    proxy2 = FaultProxy(s3_server, error_rate=0.15, seed=3)
    try:
        store2 = S3Store("s3://faults-stop/lb", endpoint_url=proxy2.url, max_attempts=10, **opts)
        _publish_until_done(rel2, store2, direct, [V1])
    finally:
        proxy2.close()
    assert proxy2.injected > 0
    assert list_releases(direct) == [V1, V2] and _latest(direct) == V2
    assert not list(direct.list(STAGING_ROOT + "/")) and not _uploads(direct)
    m = _verify_every_byte(direct, V2)
    files = pull(direct, V2, tmp_path / "pulled", progress=False)
    assert len(files) == len(all_files(m))


def test_a_killed_publish_leaves_no_orphan_under_the_version(tmp_path):
    """A publish killed after moving files but before the manifest leaves files under releases/<v>/ that no
    manifest names; the next publish of that version (here a rebuild without street looks) removes them, so a raw
    listing of the version holds exactly the manifest's files, and `releases` never listed the unpublished one."""
    first = make_release(V2, range(2, 6))
    for n in range(1, 200):  # the first kill point after a street-look file was moved into place
        root = tmp_path / f"store{n}"
        with pytest.raises(Killed):
            publish(first, KilledAfter(root, n), {})
        store = LocalStore(root)
        if any(k.startswith(f"releases/{V2}/real_streetlook/") for k in store.list(f"releases/{V2}/")):
            break
    assert not store.exists(f"releases/{V2}/manifest.json")
    assert list_releases(store) == []
    m = publish(make_release(V2, range(2, 6), street_every=0), store, {})
    listed = {k.removeprefix(f"releases/{V2}/") for k in store.list(f"releases/{V2}/")}
    assert listed == set(all_files(m)) | {"manifest.json"}
