"""Image intake outcomes on real odd files and on files the tests make."""

import io

import numpy as np
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


def test_sixteen_bit_colour_png_is_flagged():
    import struct
    import zlib

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    for colour_type, channels, mode in ((2, 3, "RGB"), (6, 4, "RGBA")):
        row = b"\0" + b"\x9c\x40\x00\x00\xff\xff\xff\xff"[:2 * channels] * 40
        png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 40, 40, 16, colour_type, 0, 0, 0))
               + chunk(b"IDAT", zlib.compress(row * 40)) + chunk(b"IEND", b""))
        assert Image.open(io.BytesIO(png)).mode == mode
        d = decode(png)
        assert "16bit" in d.flags, mode
        assert d.rgb.getpixel((0, 0))[0] == 0x9C  # the high byte of 0x9c40 (40000)
    assert "16bit" not in decode(_bytes(Image.new("RGB", (40, 40)))).flags


def test_jpeg_cut_inside_its_header_is_truncated():
    full = _bytes(Image.new("RGB", (200, 200), (200, 10, 10)), "JPEG")
    for cut in range(3, len(full) - 2, 5):
        with pytest.raises(ImageRejected) as e:
            decode(full[:cut])
        # cut before the scan data ("Truncated File Read" at open, or a header Pillow cannot identify) or inside it
        assert e.value.reason == Reject.TRUNCATED, (cut, e.value.detail)


@pytest.mark.parametrize("fmt,kw", [("JPEG", {}), ("PNG", {}), ("GIF", {}), ("TIFF", {}),
                                    ("TIFF", {"compression": "tiff_lzw"}), ("WEBP", {}), ("WEBP", {"lossless": True}),
                                    ("AVIF", {})])
def test_a_file_cut_anywhere_is_truncated(fmt, kw):
    """A download cut short is ``truncated`` wherever it stops after the format's signature: inside the header
    (GIF, TIFF), at the IFD a compressed TIFF keeps at its end, anywhere in a WebP (libwebp only says it "could not
    create decoder object"), at an AVIF's box boundary before its picture data."""
    rng = np.random.default_rng(1)
    full = _bytes(Image.fromarray((rng.random((64, 64, 3)) * 255).astype(np.uint8)), fmt, **kw)
    first = 12 if fmt in ("WEBP", "AVIF") else 8 if fmt == "PNG" else 4 if fmt == "TIFF" else 6
    boxes = []  # an AVIF cut where a top-level box ends, before its 'mdat': whole boxes, but no picture data
    while fmt == "AVIF" and full[sum(boxes) + 4:sum(boxes) + 8] != b"mdat":
        boxes.append(int.from_bytes(full[sum(boxes):sum(boxes) + 4], "big"))
    for cut in [*range(first, 200, 3), *np.cumsum(boxes), len(full) // 3, len(full) // 2, len(full) - 20]:
        with pytest.raises(ImageRejected) as e:
            decode(full[:cut])
        assert e.value.reason == Reject.TRUNCATED, (cut, e.value.detail)


def test_a_broken_header_that_is_not_cut_is_a_decode_error():
    import struct
    import zlib

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    full = _bytes(Image.new("RGB", (64, 64), (200, 10, 10)), "JPEG")
    png = _bytes(Image.new("RGB", (64, 64), (200, 10, 10)))
    short_trns = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 40, 40, 8, 2, 0, 0, 0))
                  + chunk(b"tRNS", b"\0\1") + chunk(b"IDAT", zlib.compress((b"\0" + b"\x10\x20\x30" * 40) * 40))
                  + chunk(b"IEND", b""))  # whole, but Pillow says "Truncated tRNS chunk" (a ValueError)
    for bad in (full[:3] + b"\x00" * 200 + full[203:],  # no marker after the start of image
                png[:29] + b"\x00\x00\x00\x00" + png[33:],  # IHDR with a wrong CRC
                short_trns):
        with pytest.raises(ImageRejected) as e:
            decode(bad)
        assert e.value.reason == Reject.DECODE_ERROR, e.value.detail


@pytest.mark.parametrize("fmt", ["GIF", "PNG"])
def test_an_animation_cut_after_its_first_frame_is_truncated(fmt):
    """Only the first frame is decoded, so a cut in a later frame went unseen: the stored original would be a
    broken file, and the whole download a second, different sha256."""
    rng = np.random.default_rng(2)
    frames = [Image.fromarray((rng.random((64, 64, 3)) * 255).astype(np.uint8)) for _ in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, format=fmt, save_all=True, append_images=frames[1:], duration=100)
    full = buf.getvalue()
    d = decode(full)
    assert d.n_frames == 3 and "animated" in d.flags
    for frac in (0.4, 0.5, 0.7, 0.9):
        with pytest.raises(ImageRejected) as e:
            decode(full[:int(len(full) * frac)])
        assert e.value.reason == Reject.TRUNCATED, (frac, e.value.detail)


def test_sixteen_bit_colour_key_is_compared_at_sixteen_bits():
    """A 16-bit RGB PNG's tRNS key is stored at 16 bits while Pillow keeps 8 bits a sample: compared as it was,
    the key (0, 0, 255) - almost black - left the keyed pixels black and made the bright blue (0, 0, 255 after
    scaling) transparent."""
    import struct
    import zlib

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    for key in ((0, 0, 0x00FF), (0x1234, 0x5678, 0x9ABC)):
        row = b"\0" + struct.pack(">HHH", *key) * 20 + struct.pack(">HHH", 0, 0, 0xFFFF) * 20
        png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 40, 40, 16, 2, 0, 0, 0))
               + chunk(b"tRNS", struct.pack(">HHH", *key)) + chunk(b"IDAT", zlib.compress(row * 40))
               + chunk(b"IEND", b""))
        d = decode(png)
        assert "16bit" in d.flags and "had_alpha" in d.flags
        assert d.rgb.getpixel((0, 0)) == (255, 255, 255), "the keyed colour is transparent: white"
        assert d.rgb.getpixel((39, 39)) == (0, 0, 255), "the bright blue stays"


def test_jpeg_scan_cut_before_an_end_marker_is_truncated_not_grey():
    """libjpeg only warns when the scan data stops at a marker, and fills the rest with mid-grey blocks: Pillow
    decodes such a file without a word. Extraneous bytes before a marker, which libjpeg skips losing nothing, stay
    accepted."""
    rng = np.random.default_rng(0)
    full = _bytes(Image.fromarray((rng.random((256, 256, 3)) * 255).astype(np.uint8)), "JPEG")
    sos = full.index(b"\xff\xda")
    for cut in (sos + 40, sos + (len(full) - sos) // 2, len(full) - 2000):  # ~2,500 bytes an MCU row here
        for work_side in (None, 128):  # the full decode and the intake's reduced one
            with pytest.raises(ImageRejected) as e:
                decode(full[:cut] + b"\xff\xd9", work_side=work_side)
            assert e.value.reason == Reject.TRUNCATED and "grey" in e.value.detail
    sof = full.index(b"\xff\xc0")  # the frame header claims twice the rows the scan holds
    taller = full[:sof + 5] + (512).to_bytes(2, "big") + full[sof + 7:]
    with pytest.raises(ImageRejected) as e:
        decode(taller)
    assert e.value.reason == Reject.TRUNCATED
    padded = full[:-2] + b"\x00\x00\x00" + full[-2:]  # "3 extraneous bytes before marker 0xd9"
    assert np.array_equal(np.asarray(decode(padded).rgb), np.asarray(decode(full).rgb))
    dht = full.index(b"\xff\xc4")  # "3 extraneous bytes before marker 0xc4": libjpeg-turbo's strict mode stops
    junk = full[:dht] + b"\x00\x00\x00" + full[dht:]  # there, before the scan, so Pillow is asked about it
    assert np.array_equal(np.asarray(decode(junk).rgb), np.asarray(decode(full).rgb))
    with pytest.raises(ImageRejected) as e:
        decode(junk[:(sos + len(junk)) // 2] + b"\xff\xd9")
    assert e.value.reason == Reject.TRUNCATED and "grey" in e.value.detail


def _jpeg_luma_4x2(luma: np.ndarray) -> bytes:
    """A baseline JPEG of 8 x 8 blocks each of one grey level (``luma``: one value a block, rows of blocks a
    multiple of 2, columns of 4) with the luma sampling 4 x 2 (chroma 1 x 1, flat), a layout libjpeg-turbo's
    TurboJPEG API cannot set up but libjpeg decodes; flat blocks need only DC codes (ITU-T T.81 F.1.2.1)."""
    rows, cols = luma.shape
    dc_bits = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]  # the example luminance DC table of T.81 K.3
    codes, code, k = {}, 0, 0
    for length, count in enumerate(dc_bits, 1):
        for _ in range(count):
            codes[k], code, k = (code, length), code + 1, k + 1
        code <<= 1
    bits: list[str] = []

    def block(diff: int) -> None:
        cat = abs(diff).bit_length()
        c, n = codes[cat]
        bits.append(format(c, f"0{n}b"))
        if cat:
            bits.append(format(diff if diff > 0 else diff + (1 << cat) - 1, f"0{cat}b"))
        bits.append("0")  # end of block: the AC table's one code

    pred = 0
    for my in range(rows // 2):
        for mx in range(cols // 4):
            for y in range(2):
                for x in range(4):
                    v = int(luma[my * 2 + y, mx * 4 + x]) - 128  # quantized by 8: the DC of a flat block is 8 v
                    block(v - pred)
                    pred = v
            block(0)  # Cb, Cr: flat, no colour
            block(0)
    s = "".join(bits)
    s += "1" * (-len(s) % 8)
    scan = bytes(int(s[i:i + 8], 2) for i in range(0, len(s), 8)).replace(b"\xff", b"\xff\x00")

    def seg(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body

    h, w = rows * 8, cols * 8
    sof = bytes([8]) + h.to_bytes(2, "big") + w.to_bytes(2, "big") + bytes([3, 1, 0x42, 0, 2, 0x11, 0, 3, 0x11, 0])
    dht = (bytes([0x00]) + bytes(dc_bits) + bytes(range(12))
           + bytes([0x10]) + bytes([1] + [0] * 15) + bytes([0x00]))
    sos = bytes([3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0])
    return (b"\xff\xd8" + seg(0xDB, bytes([0]) + bytes([8] * 64)) + seg(0xC0, sof) + seg(0xC4, dht)
            + seg(0xDA, sos) + scan + b"\xff\xd9")


def test_jpeg_scan_cut_is_truncated_where_libjpeg_turbo_cannot_check_it():
    """A JPEG whose sampling libjpeg-turbo's TurboJPEG API cannot set up (luma 4 x 2) is decoded by Pillow's
    libjpeg, which fills a scan cut before an end marker with mid-grey without a word: the intake still tells the
    cut (by Pillow's decode changing when more scan data is put before the marker), and accepts the whole file."""
    import simplejpeg

    luma = np.random.default_rng(1).integers(30, 220, (16, 32))
    luma[-1, -1] = 220  # the last pixel clear of grey in the whole file
    full = _jpeg_luma_4x2(luma)
    with pytest.raises(ValueError, match="subsampling"):
        simplejpeg.decode_jpeg_header(full)
    got = np.asarray(decode(full).rgb)[::8, ::8, 0].astype(int)
    assert np.abs(got - luma).max() <= 1, "the test's encoder is sound"
    for work_side in (None, 128):
        assert decode(full, work_side=work_side).flags == []
    sos = full.index(b"\xff\xda")
    for cut in (sos + 20, (sos + len(full)) // 2, len(full) - 30):
        for work_side in (None, 128):
            with pytest.raises(ImageRejected) as e:
                decode(full[:cut] + b"\xff\xd9", work_side=work_side)
            assert e.value.reason == Reject.TRUNCATED and "grey" in e.value.detail


def test_real_jpeg_with_4x2_luma_cut_is_truncated(realdata):
    """The real file that found the gap: a studio photo with 4 x 2 luma sampling, cut and closed with an end
    marker, once decoded half grey without a flag."""
    data = (realdata / "images/studio/idmvton_09164_00.jpg").read_bytes()
    assert decode(data, work_side=128).flags == []
    for frac in (0.5, 0.8, 0.97):
        with pytest.raises(ImageRejected) as e:
            decode(data[:int(len(data) * frac)] + b"\xff\xd9", work_side=128)
        assert e.value.reason == Reject.TRUNCATED


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


@pytest.mark.parametrize("fmt", ["ICO", "TGA", "EPS", "PPM"])
def test_a_format_pillow_knows_but_the_intake_does_not_open_is_named(fmt):
    """ICO, TGA, EPS… are images, of a format the intake does not open: ``unsupported_format`` with the format,
    never decoded (EPS would go to Ghostscript); bytes no format identifies stay ``not_an_image``."""
    data = _bytes(Image.new("RGB", (64, 64), (200, 10, 10)), fmt)
    with pytest.raises(ImageRejected) as e:
        decode(data)
    assert e.value.reason == Reject.UNSUPPORTED_FORMAT and e.value.detail.startswith(f"{fmt} (the intake opens JPEG")
    for junk in (b"junk", b"<html>not an image</html>" * 8, b"%PDF-1.4 not an image\n" * 4):
        with pytest.raises(ImageRejected) as e:
            decode(junk)
        assert e.value.reason == Reject.NOT_AN_IMAGE and e.value.detail == "no image format identifies it"


def test_image_refs_keep_each_rejection_in_words(tmp_path):
    """``image_refs`` keeps a rejection's detail next to its reason: the pixel count of a bomb, the format of an
    unsupported image, the path of a missing file; the same every run (no object address), null when accepted."""
    from datetime import datetime, timezone

    from lookbench_pipeline import schemas

    files = {"ok.png": _bytes(Image.effect_noise((64, 64), 40).convert("RGB")),
             "wide.png": _bytes(Image.new("L", (650, 10))), "icon.ico": _bytes(Image.new("RGB", (32, 32)), "ICO"),
             "junk.jpg": b"junk"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    now = datetime.now(timezone.utc)
    refs = [ImageRef("drop", name, 0, str(tmp_path / name), "t", now) for name in [*files, "gone.png"]]
    runs = [take_in(refs, SourceReader(), LocalStore(tmp_path / "s"), ImageConfig(max_pixels=5_000, min_side_px=8))
            for _ in range(2)]
    assert runs[0].refs == runs[1].refs
    got = {r["owner_id"]: (r["reason"], r["detail"]) for r in runs[0].refs}
    assert got == {"ok.png": (None, None), "wide.png": (Reject.DECOMPRESSION_BOMB, "650x10 > 5000 pixels"),
                   "icon.ico": (Reject.UNSUPPORTED_FORMAT, got["icon.ico"][1]),
                   "junk.jpg": (Reject.NOT_AN_IMAGE, "no image format identifies it"),
                   "gone.png": (Reject.NOT_FOUND, str(tmp_path / "gone.png"))}
    assert got["icon.ico"][1].startswith("ICO (")
    table = schemas.from_rows(runs[0].refs, schemas.IMAGE_REFS)
    assert table.schema == schemas.IMAGE_REFS and table["detail"].null_count == 1


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


def test_animated_policy_first_frame_flagged():
    frames = [Image.new("RGB", (64, 64), c) for c in ((250, 0, 0), (0, 250, 0), (0, 0, 250))]
    for f in frames:
        f.paste((255, 255, 255), (0, 0, 32, 32))
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    d = decode(buf.getvalue())
    assert d.n_frames == 3 and "animated" in d.flags
    r, g, b = d.rgb.getpixel((60, 60))
    assert r > 200 and g < 50 and b < 50, "the first frame is the one kept"


def test_cmyk_adobe_jpeg_is_not_inverted():
    d = decode(_bytes(Image.new("CMYK", (64, 64), (0, 255, 255, 0)), "JPEG"))
    r, g, b = d.rgb.getpixel((32, 32))
    assert r > 200 and g < 60 and b < 60 and "cmyk" in d.flags


def test_avif_and_webp_and_lying_extension(tmp_path):
    im = Image.new("RGB", (64, 48), (10, 120, 200))
    im.paste((250, 250, 250), (0, 0, 20, 20))
    for fmt in ("AVIF", "WEBP"):
        d = decode(_bytes(im, fmt))
        assert d.format == fmt and (d.width, d.height) == (64, 48)
    p = tmp_path / "photo.jpg"
    p.write_bytes(_bytes(im, "PNG"))
    assert decode(p.read_bytes()).format == "PNG"


def test_published_bytes_carry_no_exif(tmp_path):
    from lookbench_pipeline.images import publishable_jpeg
    from lookbench_pipeline.store import original_key

    im = Image.effect_noise((80, 60), 30).convert("RGB")
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # Make
    exif[0x0112] = 6  # rotate 90 CW on display
    exif.get_ifd(0x8825)[1] = "N"  # GPSLatitudeRef
    raw = _bytes(im, "JPEG", exif=exif.tobytes())
    assert Image.open(io.BytesIO(raw)).getexif().get(0x010F) == "PhoneMaker"
    store = LocalStore(tmp_path)
    import hashlib

    sha = hashlib.sha256(raw).hexdigest()
    store.put_bytes(original_key(sha), raw)
    out = Image.open(io.BytesIO(publishable_jpeg(store, sha)))
    assert len(out.getexif()) == 0 and "exif" not in out.info
    assert out.size == (60, 80), "orientation applied to the pixels, not left in metadata"


def test_reduced_decode_still_rejects_truncation():
    big = Image.effect_noise((1600, 1200), 60).convert("RGB")
    data = _bytes(big, "JPEG", quality=90)
    with pytest.raises(ImageRejected) as e:
        decode(data[: len(data) // 2], work_side=128)
    assert e.value.reason == Reject.TRUNCATED
    d = decode(data, work_side=128)
    assert (d.width, d.height) == (1600, 1200) and min(d.rgb.size) >= 128 and max(d.rgb.size) < 1600


def test_alpha_composited_in_strips_is_the_whole_picture_composite():
    """``_on_white`` composites strips of rows to hold one full-size RGB copy instead of four RGBA ones: its result
    is pixel for pixel the composite of the whole picture, for every mode with alpha or a colour key."""
    from lookbench_pipeline.images import _on_white

    def whole(im: Image.Image) -> Image.Image:
        rgba = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")

    a = np.random.default_rng(5).integers(0, 256, (301, 257, 4), dtype=np.uint8)
    keyed_rgb = Image.fromarray(a[..., :3].copy())
    keyed_rgb.info["transparency"] = tuple(int(v) for v in a[0, 0, :3])
    keyed_l = Image.fromarray(a[..., 0].copy(), "L")
    keyed_l.info["transparency"] = int(a[0, 0, 0])
    palette = Image.fromarray(a[..., :3].copy()).quantize(64)
    palette.info["transparency"] = 3
    for im in (Image.fromarray(a, "RGBA"), Image.fromarray(a[..., :2].copy(), "LA"), keyed_rgb, keyed_l,
               palette.convert("PA")):
        for strip in (1, 1000, 257 * 7, 1 << 22):  # a row at a time, strips that do not divide the height, whole
            assert np.array_equal(np.asarray(_on_white(im, strip)), np.asarray(whole(im))), (im.mode, strip)


def test_a_crawled_image_reference_of_another_scheme_is_never_read(tmp_path):
    """A product's image named file:///etc/passwd (or a data: URI) with no download row (a feed written before
    such rows were recorded) is rejected unsupported_scheme as the intake does it, never opened as a local file;
    an image drop's file is still read."""
    from lookbench_pipeline import schemas
    from lookbench_pipeline.config import load_config
    from datetime import datetime, timezone

    from lookbench_pipeline.pipeline import stage_images

    now = datetime.now(timezone.utc)
    products = schemas.from_rows([{"product_id": "p", "site": "s", "url": "https://shop.test/p",
                                   "image_urls": ["file:///etc/passwd", "data:image/png;base64,…#sha256=0,9 chars"],
                                   "first_seen_at": now, "last_seen_at": now, "crawled_at": now}], schemas.PRODUCTS)
    cfg = load_config(None, data_dir=str(tmp_path / "data"), store={"url": str(tmp_path / "store")})
    refs, _, counts = stage_images(cfg, products, schemas.empty(schemas.LOOKS), schemas.empty(schemas.DROP_ITEMS),
                                   schemas.empty(schemas.IMAGE_DOWNLOADS), LocalStore(tmp_path / "store"))
    assert [r["reason"] for r in refs.to_pylist()] == [Reject.UNSUPPORTED_SCHEME] * 2
    assert counts["in"] == 2 == counts["rejected"] and counts["accepted"] == 0
