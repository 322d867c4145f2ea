"""Image intake outcomes on real odd files and on files the tests make."""

import io

import pytest
from PIL import Image

from lookbench_pipeline.config import ImageConfig
from lookbench_pipeline.images import ImageRef, ImageRejected, Reject, SourceReader, decode, phash_hex, take_in
from lookbench_pipeline.store import LocalStore


def _bytes(im: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def test_real_odd_files_have_defined_outcomes(realdata):
    odd = realdata / "images/odd"
    outcome = {}
    for f in sorted(odd.iterdir()):
        try:
            d = decode(f.read_bytes())
            assert d.rgb.mode == "RGB"
            outcome[f.name] = ("ok", d.format, d.flags)
        except ImageRejected as exc:
            outcome[f.name] = ("rejected", exc.reason)
    assert outcome["pillow_truncated_jpeg.jpg"] == ("rejected", Reject.TRUNCATED)
    assert outcome["pillow_truncated_image.png"] == ("rejected", Reject.TRUNCATED)
    assert outcome["rembg_plants-1.jpg"][1] == "PNG", "format comes from the bytes, not the extension"
    assert "cmyk" in outcome["pillow_pil_sample_cmyk.jpg"][2]
    assert "animated" in outcome["pillow_hopper.gif"][2] or outcome["pillow_hopper.gif"][0] == "ok"
    assert "exif_rotated" in outcome["pillow_hopper_orientation_6.jpg"][2]


def test_exif_orientation_applied_before_hashing(realdata):
    odd = realdata / "images/odd"
    ref = phash_hex(decode((odd / "pillow_hopper_gray.jpg").read_bytes()).rgb)
    for name in ("pillow_hopper_orientation_3.jpg", "pillow_hopper_orientation_6.jpg",
                 "pillow_hopper_orientation_8.jpg"):
        h = phash_hex(decode((odd / name).read_bytes()).rgb)
        assert bin(int(h, 16) ^ int(ref, 16)).count("1") <= 4, name


def test_alpha_hidden_colours_do_not_change_the_hash():
    a = Image.new("RGBA", (64, 64), (255, 0, 0, 0))
    b = Image.new("RGBA", (64, 64), (0, 0, 255, 0))
    for im in (a, b):
        im.paste((10, 10, 10, 255), (16, 16, 48, 48))
    da, db = decode(_bytes(a)), decode(_bytes(b))
    assert list(da.rgb.getdata()) == list(db.rgb.getdata())
    assert da.rgb.getpixel((0, 0)) == (255, 255, 255)
    assert "had_alpha" in da.flags


def test_sixteen_bit_is_scaled_not_clipped():
    im = Image.new("I;16", (40, 40), 40000)
    d = decode(_bytes(im))
    assert d.rgb.getpixel((0, 0)) == (156, 156, 156)  # 40000 >> 8
    assert "16bit" in d.flags


def test_rejections_named():
    with pytest.raises(ImageRejected) as e:
        decode(b"")
    assert e.value.reason == Reject.EMPTY
    with pytest.raises(ImageRejected) as e:
        decode(b"<html>not an image</html>")
    assert e.value.reason == Reject.NOT_AN_IMAGE
    with pytest.raises(ImageRejected) as e:
        decode(_bytes(Image.new("RGB", (1, 1))))
    assert e.value.reason == Reject.TOO_SMALL
    with pytest.raises(ImageRejected) as e:
        decode(_bytes(Image.new("L", (300, 300))), ImageConfig(max_pixels=10_000))
    assert e.value.reason == Reject.DECOMPRESSION_BOMB


def test_uniform_images_flagged():
    assert "uniform" in decode(_bytes(Image.new("RGB", (64, 64), (200, 10, 10)))).flags


def test_take_in_reconciles_and_stores(tmp_path):
    good = tmp_path / "good.png"
    good.write_bytes(_bytes(Image.effect_noise((64, 64), 40).convert("RGB")))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"junk")
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    refs = [ImageRef("drop", "a", 0, str(good), "t", now), ImageRef("drop", "b", 0, str(bad), "t", now),
            ImageRef("drop", "c", 0, str(tmp_path / "missing.png"), "t", now),
            ImageRef("product", "d", 0, "https://cdn.test/x.jpg", "t", now),
            ImageRef("product", "e", 0, "https://cdn.test/y.jpg", "t", now)]
    reader = SourceReader([{"url": "https://cdn.test/x.jpg", "stored_path": None, "reason": "host_not_allowed"}])
    store = LocalStore(tmp_path / "store")
    res = take_in(refs, reader, store)
    c = res.counts
    assert c["in"] == 5 == c["accepted"] + c["rejected"]
    assert [r["reason"] for r in res.refs] == [None, Reject.NOT_AN_IMAGE, Reject.NOT_FOUND, "host_not_allowed",
                                               Reject.NOT_DOWNLOADED]
    sha = res.refs[0]["image_sha256"]
    assert store.exists(f"originals/{sha[:2]}/{sha}") and len(res.images) == 1
