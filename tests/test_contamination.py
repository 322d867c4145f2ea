"""The contamination index over legacy benchmark formats and earlier releases."""

import io
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lookbench_pipeline import schemas
from lookbench_pipeline.config import LegacySource
from lookbench_pipeline.contamination import LegacyFormatError, find_contamination, iter_source, update_index
from lookbench_pipeline.images import color_signature, decode, phash_hex


def _photo(seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 255, (12, 9, 3), dtype=np.uint8)
    return Image.fromarray(a).resize((300, 400), Image.Resampling.BICUBIC)


def _fashion200k(root: Path, images: dict[str, Image.Image]) -> None:
    (root / "labels").mkdir(parents=True)
    lines = []
    for i, (rel, im) in enumerate(images.items()):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        im.save(p, quality=85)
        lines.append(f"{rel}\t0.{90 + i}\tblack dress number {i}")
    (root / "labels/dress_train_detect_all.txt").write_text("\n".join(lines) + "\n")


def _inshop(root: Path, images: dict[str, Image.Image]) -> None:
    (root / "Eval").mkdir(parents=True)
    rows = ["%d" % len(images), "image_name item_id evaluation_status"]
    for rel, im in images.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        im.save(p)
        rows.append(f"{rel} {rel.split('/')[3]} query")
    (root / "Eval/list_eval_partition.txt").write_text("\n".join(rows) + "\n")


def _new_images(ims):
    t = datetime(2026, 8, 1, tzinfo=timezone.utc)
    rows = []
    for name, im in ims.items():
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=95)
        d = decode(buf.getvalue())
        rows.append({"image_sha256": name, "store_key": "", "format": "JPEG", "width": 300, "height": 400,
                     "n_frames": 1, "flags": d.flags, "phash": phash_hex(d.rgb), "phash_method": "",
                     "color_signature": color_signature(d.rgb), "first_seen_at": t})
    return schemas.from_rows(rows, schemas.IMAGES)


def test_legacy_formats_and_matching(tmp_path):
    f2 = tmp_path / "f200k"
    _fashion200k(f2, {"women/dresses/casual_dresses/51727804/51727804_0.jpeg": _photo(1),
                      "women/dresses/casual_dresses/51727805/51727805_0.jpeg": _photo(2)})
    ds = tmp_path / "inshop"
    _inshop(ds, {"img/WOMEN/Dresses/id_00000002/02_1_front.jpg": _photo(3)})
    imgs = list(iter_source("fashion200k", f2))
    assert [i.item_id for i in imgs] == ["51727804", "51727805"]
    assert [i.item_id for i in iter_source("deepfashion_inshop", ds)] == ["id_00000002"]

    sources = [LegacySource(name="fashion200k", kind="fashion200k", path=f2),
               LegacySource(name="deepfashion", kind="deepfashion_inshop", path=ds)]
    index, counts = update_index(tmp_path / "index.parquet", sources)
    assert index.num_rows == 3 and counts["fashion200k.indexed"] == 2

    new = _new_images({"leak-resized": _photo(1).resize((240, 320)), "leak-inshop": _photo(3),
                       "fresh": _photo(99)})
    found = find_contamination(new, index, threshold=8, max_color_diff=32).to_pylist()
    by = {r["image_sha256"]: r for r in found}
    assert set(by) == {"leak-resized", "leak-inshop"}
    assert by["leak-resized"]["source"] == "fashion200k" and by["leak-resized"]["kind"] == "near"
    assert by["leak-inshop"]["matched_item_id"] == "id_00000002"


def test_index_is_incremental(tmp_path, monkeypatch):
    f2 = tmp_path / "f200k"
    _fashion200k(f2, {"women/tops/t/1/1_0.jpeg": _photo(5)})
    src = [LegacySource(name="f", kind="fashion200k", path=f2)]
    update_index(tmp_path / "i.parquet", src)
    import lookbench_pipeline.contamination as c

    monkeypatch.setattr(c, "_row", lambda *a, **k: pytest.fail("re-read an unchanged file"))
    index, _ = update_index(tmp_path / "i.parquet", src)
    assert index.num_rows == 1


def test_index_reads_again_a_file_copied_over_with_its_size_and_time_kept(tmp_path):
    """``cp -p`` / ``rsync -t`` / a rewrite within one second keep size and modification time: the index must not
    keep the old picture's pHash (a leak would go unseen)."""
    import os

    f2 = tmp_path / "f200k"
    rel = "women/tops/t/1/1_0.jpeg"
    _fashion200k(f2, {rel: _photo(5)})
    src = [LegacySource(name="f", kind="fashion200k", path=f2)]
    before, _ = update_index(tmp_path / "i.parquet", src)
    p = f2 / rel
    old, st = p.read_bytes(), p.stat()
    b = io.BytesIO()
    _photo(6).save(b, "JPEG", quality=60)
    assert len(b.getvalue()) < len(old)
    new = b.getvalue() + b"\0" * (len(old) - len(b.getvalue()))  # padding after the end-of-image marker
    p.write_bytes(new)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (p.stat().st_size, p.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    after, _ = update_index(tmp_path / "i.parquet", src)
    fresh, _ = update_index(tmp_path / "fresh.parquet", src)
    [r0], [r1], [r2] = before.to_pylist(), after.to_pylist(), fresh.to_pylist()
    assert r1["phash"] == r2["phash"] != r0["phash"]


def test_a_listed_file_that_cannot_be_read_is_counted_not_fatal(tmp_path):
    f2 = tmp_path / "f200k"
    _fashion200k(f2, {"women/tops/t/1/1_0.jpeg": _photo(5)})
    (f2 / "women/tops/t/2/2_0.jpeg").mkdir(parents=True)  # listed, but a folder: IsADirectoryError on read
    (f2 / "women/tops/t/3").mkdir(parents=True)
    (f2 / "women/tops/t/3/3_0.jpeg").write_bytes(b"<html>not found</html>")  # read, then rejected by the intake
    with open(f2 / "labels/dress_train_detect_all.txt", "a") as fh:
        fh.write("women/tops/t/2/2_0.jpeg\t0.5\tx\nwomen/tops/t/3/3_0.jpeg\t0.5\ty\n")
    index, counts = update_index(tmp_path / "i.parquet", [LegacySource(name="f", kind="fashion200k", path=f2)])
    assert index.num_rows == 1 and counts == {"f.indexed": 1, "f.unreadable": 2}


def test_bad_layouts_are_named(tmp_path):
    with pytest.raises(LegacyFormatError, match="labels"):
        list(iter_source("fashion200k", tmp_path))
    (tmp_path / "Eval").mkdir()
    (tmp_path / "Eval/list_eval_partition.txt").write_text("1\nimage_name item_id evaluation_status\nonly-two cols\n")
    with pytest.raises(LegacyFormatError, match="expected"):
        list(iter_source("deepfashion_inshop", tmp_path))


def test_a_mirrored_copy_of_a_legacy_image_is_contamination(tmp_path):
    """Training sets are augmented by left-right flips, so a flipped copy of a legacy image is a leak: found as
    ``mirrored`` (colour-confirmed like a near copy), while the image itself stays ``near`` and an unrelated one,
    flipped or not, is not found."""
    from PIL import ImageOps

    f2 = tmp_path / "f200k"
    _fashion200k(f2, {"women/dresses/d/7/7_0.jpeg": _photo(7), "women/dresses/d/8/8_0.jpeg": _photo(8)})
    index, _ = update_index(tmp_path / "index.parquet", [LegacySource(name="f200k", kind="fashion200k", path=f2)])
    assert all(r["mirrored"]["phash"] != r["phash"] for r in index.to_pylist())
    new = _new_images({"flipped": ImageOps.mirror(_photo(7)), "flipped-resized": ImageOps.mirror(_photo(8)).resize(
        (240, 320)), "same": _photo(7), "fresh-flipped": ImageOps.mirror(_photo(99))})
    assert phash_hex(decode(_jpeg(ImageOps.mirror(_photo(7)))).rgb) != phash_hex(decode(_jpeg(_photo(7))).rgb)
    by = {r["image_sha256"]: r for r in find_contamination(new, index, threshold=6, max_color_diff=32).to_pylist()}
    seven, eight = "women/dresses/d/7/7_0.jpeg", "women/dresses/d/8/8_0.jpeg"
    assert {k: (v["kind"], v["matched_path"]) for k, v in by.items()} == {
        "flipped": ("mirrored", seven), "flipped-resized": ("mirrored", eight), "same": ("near", seven)}


def test_an_index_built_before_mirror_signatures_is_read_again(tmp_path):
    """An index written before the ``mirrored`` column existed has rows without it: they are read again (as rows
    without ``fg_signature`` were), so mirrored leaks are not missed; until then, matching skips them."""
    import pyarrow.parquet as pq

    f2 = tmp_path / "f200k"
    _fashion200k(f2, {"women/tops/t/1/1_0.jpeg": _photo(5)})
    src = [LegacySource(name="f", kind="fashion200k", path=f2)]
    index, _ = update_index(tmp_path / "i.parquet", src)
    old = index.drop_columns(["mirrored"])
    pq.write_table(old, tmp_path / "i.parquet")
    assert find_contamination(_new_images({"x": _photo(5)}), old, 6, 32).to_pylist()[0]["kind"] == "near"
    again, _ = update_index(tmp_path / "i.parquet", src)
    assert again.to_pylist()[0]["mirrored"] == index.to_pylist()[0]["mirrored"]


def _jpeg(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=95)
    return buf.getvalue()
