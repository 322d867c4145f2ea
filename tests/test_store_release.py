"""Object stores (local and a real S3-compatible server) and immutable release publishing."""

from datetime import datetime, timezone

import boto3
import pyarrow as pa
import pytest

from lookbench_pipeline import schemas
from lookbench_pipeline.releases import (ReleaseExistsError, ReleaseIntegrityError, ReleaseTables, list_releases,
                                         read_file, read_manifest)
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import LocalStore, S3Store, StoreError, open_store
from lookbench_pipeline.windows import Window


def _release(version="v20260701", label="top"):
    t0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    row = {"image": {"bytes": b"\xff\xd8fake", "path": "a.jpg"}, "item_ID": "i1", "category": label,
           "main_attribute": "sleeve_length: short", "other_attributes": "", "task": "single-item",
           "difficulty": "easy", "sample_id": "s1", "subset": "real_studio_flat", "role": "query",
           "attributes": [{"name": "sleeve_length", "value": "short"}], "annotator": "t", "image_sha256": "ab",
           "width": 10, "height": 10, "look_id": None, "box": None, "site": "x", "source_url": "u",
           "crawled_at": t0, "first_seen_at": t0}
    t = schemas.from_rows([row], schemas.RELEASE)
    w = Window(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 7, 1, tzinfo=timezone.utc))
    return ReleaseTables(version, w, {("real_studio_flat", "query"): t, ("real_studio_flat", "gallery"): t},
                         counts={"query_rows": 1})


def _roundtrip(store):
    m = publish(_release(), store, {"code_version": "test"})
    assert list_releases(store) == ["v20260701"]
    assert store.get_bytes("releases/latest") == b"v20260701"
    t = read_file(store, "v20260701", "real_studio_flat", "query")
    assert t.schema.field("first_seen_at").type == pa.timestamp("us", tz="UTC")
    assert t.column("first_seen_at")[0].as_py().microsecond == 123456
    # same content again: a no-op; different content: refused
    again = publish(_release(), store, {"code_version": "test"})
    assert again["already_published"] and again["files"] == m["files"]
    with pytest.raises(ReleaseExistsError, match="immutable"):
        publish(_release(label="dress"), store, {"code_version": "test"})
    assert read_manifest(store, "v20260701")["files"] == m["files"]


def test_local_store_release(tmp_path):
    _roundtrip(LocalStore(tmp_path / "store"))


def test_tampered_file_detected(tmp_path):
    store = LocalStore(tmp_path / "store")
    publish(_release(), store, {})
    store.put_bytes("releases/v20260701/real_studio_flat/query.parquet", b"tampered")
    with pytest.raises(ReleaseIntegrityError):
        read_file(store, "v20260701", "real_studio_flat", "query")


def test_s3_store_release(s3_server, s3_env):
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket="lookbench")
    store = open_store("s3://lookbench/bench", endpoint_url=s3_server)
    assert isinstance(store, S3Store)
    _roundtrip(store)
    keys = list(store.list("releases/"))
    assert "releases/v20260701/manifest.json" in keys
    with pytest.raises(StoreError):
        store.get_bytes("releases/nope")


def test_bad_keys_and_urls(tmp_path):
    store = LocalStore(tmp_path)
    with pytest.raises(StoreError):
        store.put_bytes("../escape", b"x")
    with pytest.raises(StoreError):
        open_store("ftp://host/x")


def test_a_drop_image_refused_at_intake_keeps_its_intake_reason_in_the_release(tmp_path):
    """A dropped photo that the intake refused is rejected at the release with the intake's reason
    (``intake:<reason>``, as for AI-generated images), not a generic one; counts reconcile."""
    from lookbench_pipeline.releases.build import build
    from lookbench_pipeline.taxonomy import Taxonomy

    t = datetime(2026, 8, 1, tzinfo=timezone.utc)
    drops = [{"drop_image_id": f"d{i}", "item_id": f"it{i}", "drop": "photos", "path": f"/x/{name}",
              "subset": "real_studio_flat", "role": "gallery", "title": None, "description": None,
              "first_seen_at": t} for i, name in enumerate(["zero.jpg", "text.png", "cut.jpg"])]
    refs = [{"ref_id": f"r{i}", "owner_type": "drop", "owner_id": f"d{i}", "position": 0, "source": d["path"],
             "site": "drop:photos", "status": "rejected", "reason": reason, "image_sha256": None, "first_seen_at": t}
            for i, (d, reason) in enumerate(zip(drops, ["empty_file", "not_an_image", "truncated"]))]
    rel = build(version="v20260701", window=Window(datetime(2026, 7, 1, tzinfo=timezone.utc),
                                                   datetime(2027, 1, 1, tzinfo=timezone.utc)),
                products=schemas.empty(schemas.PRODUCTS), looks=schemas.empty(schemas.LOOKS),
                drop_items=schemas.from_rows(drops, schemas.DROP_ITEMS),
                image_refs=schemas.from_rows(refs, schemas.IMAGE_REFS), images=schemas.empty(schemas.IMAGES),
                clusters=schemas.empty(schemas.IMAGE_CLUSTERS), annotations=schemas.empty(schemas.ANNOTATIONS),
                taxonomy=Taxonomy.load(), store=LocalStore(tmp_path / "store"))
    assert sorted(r["reason"] for r in rel.rejected) == ["intake:empty_file", "intake:not_an_image",
                                                         "intake:truncated"]
    assert rel.counts["candidates"] == 3 == rel.counts["rejected"]


def test_a_gallery_thumbnail_below_the_gallery_minimum_is_rejected(tmp_path):
    """A gallery picture whose short side is under images.gallery_min_side_px (200 px by default) is a thumbnail:
    rejected ``gallery_too_small``; a full-size picture of another item is kept; counts reconcile."""
    from lookbench_pipeline.config import ImageConfig
    from lookbench_pipeline.releases.build import build
    from lookbench_pipeline.taxonomy import Taxonomy

    t = datetime(2026, 8, 1, tzinfo=timezone.utc)
    sizes = {"thumb": (103, 130), "full": (900, 1200)}
    drops = [{"drop_image_id": f"d-{k}", "item_id": f"it-{k}", "drop": "photos", "path": f"/x/{k}.jpg",
              "subset": "real_studio_flat", "role": "gallery", "title": None, "description": None,
              "first_seen_at": t} for k in sizes]
    sha = {k: (k[0] * 64) for k in sizes}
    refs = [{"ref_id": f"r-{k}", "owner_type": "drop", "owner_id": f"d-{k}", "position": 0, "source": f"/x/{k}.jpg",
             "site": "drop:photos", "status": "accepted", "reason": None, "image_sha256": sha[k], "first_seen_at": t}
            for k in sizes]
    images = [{"image_sha256": sha[k], "store_key": f"originals/{sha[k]}", "format": "JPEG", "width": w, "height": h,
               "n_frames": 1, "flags": [], "phash": bytes(8), "phash_method": "dct", "color_signature": None,
               "first_seen_at": t} for k, (w, h) in sizes.items()]
    clusters = [{"image_sha256": sha[k], "cluster_id": sha[k], "is_representative": True, "duplicate_kind": None,
                 "hamming_to_representative": 0} for k in sizes]
    ann = [{"item_id": f"it-{k}", "status": "labelled", "reason": None, "category": "dress",
            "attributes": [{"name": "color", "value": "red"}], "annotator": "test/1", "taxonomy_version": "2"}
           for k in sizes]
    rel = build(version="v20260701", window=Window(datetime(2026, 7, 1, tzinfo=timezone.utc),
                                                   datetime(2027, 1, 1, tzinfo=timezone.utc)),
                products=schemas.empty(schemas.PRODUCTS), looks=schemas.empty(schemas.LOOKS),
                drop_items=schemas.from_rows(drops, schemas.DROP_ITEMS),
                image_refs=schemas.from_rows(refs, schemas.IMAGE_REFS),
                images=schemas.from_rows(images, schemas.IMAGES),
                clusters=schemas.from_rows(clusters, schemas.IMAGE_CLUSTERS),
                annotations=schemas.from_rows(ann, schemas.ANNOTATIONS),
                taxonomy=Taxonomy.load(), store=LocalStore(tmp_path / "store"),
                gallery_min_side_px=ImageConfig().gallery_min_side_px)
    assert [r["reason"] for r in rel.rejected] == ["gallery_too_small"]
    assert rel.counts["candidates"] == 2


def test_a_candidate_round_trips_through_its_summary(tmp_path):
    """make_candidate writes the candidate folder and returns a Candidate whose summary (the release_candidate
    asset's value) reads back to the same candidate and the same tables; write_candidate's candidate.json is
    unchanged by the provenance."""
    import json

    from lookbench_pipeline.releases import Candidate, make_candidate, read_candidate, write_candidate

    rel = _release()
    annotations = pa.table({"annotator": ["b", None, "a", "b"]})
    cand = make_candidate(rel, tmp_path / "c", annotations=annotations, negatives={"enabled": False},
                          annotation={"annotators": ["a"]}, aigen={"enabled": False},
                          detector={"role": "detector", "weights": "w"})
    d = cand.to_dict()
    assert set(d) == {"version", "window", "folder", "files", "counts", "annotators", "negatives", "annotation",
                      "aigen", "models"}
    assert d["annotators"] == ["a", "b"] and d["models"] == [{"role": "detector", "weights": "w"}]
    back = Candidate.from_dict(json.loads(json.dumps(d)))
    assert back == cand and back.to_dict() == d and back.tables is None
    assert back.provenance() == {k: d[k] for k in ("negatives", "annotation", "aigen", "models")}
    read = read_candidate(back)
    assert read.version == rel.version and read.window == rel.window
    assert {k: t.equals(rel.files[k]) for k, t in read.files.items()} == {k: True for k in rel.files}
    # the candidate folder's own summary is write_candidate's, without the provenance
    written = json.loads((tmp_path / "c" / "candidate.json").read_text())
    assert written == json.loads(json.dumps(write_candidate(rel, tmp_path / "c2") | {"folder": str(tmp_path / "c")}))
    # a summary recorded without the provenance sections gives a candidate without them
    assert Candidate.from_dict(written).provenance() == {}
    assert make_candidate(rel, tmp_path / "c3", annotations=annotations, negatives={}, annotation={}, aigen={},
                          detector={"role": "none"}).models == []


def test_the_old_release_module_still_exports_its_names_with_a_deprecation_warning():
    """``lookbench_pipeline.release`` (split into the releases package) keeps its public names for one release."""
    import importlib
    import sys
    import warnings

    from lookbench_pipeline.releases import build, candidate, publish, reader

    sys.modules.pop("lookbench_pipeline.release", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("lookbench_pipeline.release")
    assert any(issubclass(w.category, DeprecationWarning) and "lookbench_pipeline.releases" in str(w.message)
               for w in caught)
    assert old.build is build.build and old.publish is publish.publish and old.Window is Window
    assert old.EmptyReleaseError is publish.EmptyReleaseError and old.DOC_TYPES is publish.DOC_TYPES
    for name in ("ReleaseTables", "PARQUET_OPTS", "REJECTED", "parquet_bytes", "write_candidate", "read_candidate",
                 "check_candidate"):
        assert getattr(old, name) is getattr(candidate, name)
    for name in ("LATEST_KEY", "MAX_FILE_BYTES", "STREET_SUBSETS", "SUBSET_TASK", "SUBSETS", "ReleaseExistsError",
                 "ReleaseIntegrityError", "all_files", "check_manifest", "choose_subsets", "list_releases", "pull",
                 "read_file", "read_manifest", "read_manifest_bytes", "read_range", "release_prefix",
                 "resolve_version"):
        assert getattr(old, name) is getattr(reader, name)


def test_a_release_table_encodes_the_same_built_in_memory_or_read_back():
    """pyarrow names a list's values ``item`` in memory and ``element`` when it reads Parquet back; the Arrow schema
    stored in the file keeps the name, so without normalising, a same-day rerun that published a table read back
    from its candidate met ReleaseExistsError on identical data."""
    import io

    import pyarrow.parquet as pq

    from lookbench_pipeline import schemas
    from lookbench_pipeline.releases.candidate import parquet_bytes

    row = {name: None for name in schemas.RELEASE.names}
    row.update(item_ID="i1", sample_id="s1", attributes=[{"name": "color", "value": "red"}], box=[1.0, 2.0, 3.0, 4.0])
    built = schemas.from_rows([row], schemas.RELEASE)
    assert "item" in str(built.schema.field("attributes").type)
    data = parquet_bytes(built)
    back = pq.read_table(io.BytesIO(data))
    assert "element" in str(back.schema.field("attributes").type)
    assert parquet_bytes(back) == data and back.equals(pq.read_table(io.BytesIO(parquet_bytes(back))))


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_folder_store_writes_objects_with_the_umask_mode(tmp_path, umask, mode):
    """Objects in a folder store get the mode any file gets (0o666 less the umask), not mkstemp's 0600: a release
    in a folder store served as a mirror by another user must be readable by it."""
    import os
    import stat

    from lookbench_pipeline.store import LocalStore

    store = LocalStore(tmp_path / "store")
    old = os.umask(umask)
    try:
        store.put_bytes("releases/v20260701/README.md", b"card")
        store.put_new("releases/v20260701/manifest.json", b"{}")
    finally:
        os.umask(old)
    for key in ("releases/v20260701/README.md", "releases/v20260701/manifest.json"):
        assert stat.S_IMODE(os.stat(store.path(key)).st_mode) == mode, key
