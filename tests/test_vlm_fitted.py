"""Image-model inputs fitted once and kept in the object store (lookbench_pipeline.vlm.fitted): what is stored is
exactly what prepare_image sends, the counts reconcile, the annotator sends the stored bytes without fitting, and
a stored input that is unsound or for another budget is never sent."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from lookbench_pipeline.demo.scripted_openai import ScriptedOpenAI
from lookbench_pipeline.store import LocalStore, fitted_key, original_key, sha256_hex
from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.vlm import (FIT_METHOD, ImageItem, VlmAnnotator, VlmJudge, fit_inputs, prepare_image,
                                    read_fitted)
from lookbench_pipeline.vlm import annotator as annotator_module
from lookbench_pipeline.vlm.fitted import payload

MODEL = "scripted/vlm"


def _photo(w: int, h: int, seed: int, fmt: str = "JPEG") -> bytes:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, (h // 16, w // 16, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.Resampling.BILINEAR)
    b = io.BytesIO()
    img.save(b, fmt, **({"quality": 88} if fmt == "JPEG" else {}))
    return b.getvalue()


@pytest.fixture()
def shop(tmp_path):
    """A store with a 3 MP JPEG, a 2 MP PNG, a small JPEG the server takes as it is, an image the model cannot take
    (aspect ratio 300:1) and bytes that start like a JPEG whose first segment claims 8302 bytes the file does not
    have (a truncated image); plus the sha256 of an original that is not there."""
    store = LocalStore(tmp_path / "store")
    originals = {"jpeg": _photo(1500, 2000, 1), "png": _photo(1200, 1600, 2, "PNG"), "small": _photo(280, 420, 3),
                 "thin": _photo(3000, 10, 4), "junk": b"\xff\xd8\xff\xe0 not a jpeg"}
    shas = {}
    for name, data in originals.items():
        shas[name] = sha256_hex(data)
        store.put_bytes(original_key(shas[name]), data)
    shas["missing"] = "0" * 64
    return store, originals, shas


def test_fit_inputs_stores_what_prepare_image_sends_once_and_counts_reconcile(shop):
    store, originals, shas = shop
    counts = fit_inputs(store, [*shas.values(), shas["jpeg"]], 1280, workers=2)
    assert counts.images == 7 - 1  # distinct
    assert counts.fitted == 3 and counts.reused == 0
    assert dict(counts.refused) == {"aspect_ratio_over_200": 1, "image_truncated": 1}
    assert dict(counts.unreadable) == {"no_original": 1}
    assert counts.images == counts.fitted + counts.reused + sum(counts.refused.values()) \
        + sum(counts.unreadable.values())
    for name in ("jpeg", "png", "small"):
        stored = store.get_bytes(fitted_key(shas[name], 1280, FIT_METHOD))
        assert stored == payload(prepare_image(originals[name], None, 1280))[0]
    assert counts.bytes_stored == sum(len(store.get_bytes(fitted_key(shas[n], 1280, FIT_METHOD)))
                                      for n in ("jpeg", "png", "small"))
    # the small JPEG is passed through as it is; the photos become JPEGs on the processor's grid
    assert store.get_bytes(fitted_key(shas["small"], 1280, FIT_METHOD)) == originals["small"]
    for name in ("jpeg", "png"):
        im = Image.open(io.BytesIO(store.get_bytes(fitted_key(shas[name], 1280, FIT_METHOD))))
        assert im.format == "JPEG" and im.size[0] % 28 == 0 and im.size[1] % 28 == 0
        assert im.size[0] * im.size[1] <= 1280 * 28 * 28
    again = fit_inputs(store, shas.values(), 1280, workers=2)
    assert again.fitted == 0 and again.reused == 3 and again.bytes_stored == 0
    other = fit_inputs(store, [shas["jpeg"]], 256, workers=1)  # another budget: another input
    assert other.fitted == 1
    assert fitted_key(shas["jpeg"], 256, FIT_METHOD) != fitted_key(shas["jpeg"], 1280, FIT_METHOD)


def test_read_fitted_checks_the_header_and_the_budget():
    fitted = prepare_image(_photo(1500, 2000, 5), None, 1280)
    body, mime = payload(fitted)
    assert mime == "image/jpeg"
    back = read_fitted(body, 1280)
    assert back is not None and back.data_url == fitted.data_url
    assert (back.width, back.height, back.tokens) == (fitted.width, fitted.height, fitted.tokens)
    assert not back.passthrough
    assert read_fitted(body, 256) is None  # over a smaller budget: never sent
    assert read_fitted(b"garbage", 1280) is None
    assert read_fitted(_photo(20, 20, 6), 1280) is None  # below 28 pixels: the processor would refuse it
    gif = io.BytesIO()
    Image.new("RGB", (100, 100)).save(gif, "GIF")
    assert read_fitted(gif.getvalue(), 1280) is None


def _annotate(store, shas, monkeypatch, **kw):
    calls = []
    real = annotator_module.prepare_image
    monkeypatch.setattr(annotator_module, "prepare_image", lambda *a, **k: calls.append(1) or real(*a, **k))
    with ScriptedOpenAI(MODEL) as srv:
        ann = VlmAnnotator(srv.url, MODEL, Taxonomy.load(), judge=VlmJudge(srv.url, MODEL), backoff_s=0.001,
                           max_backoff_s=0.01, **kw)
        items = [ImageItem(f"item-{k}", (lambda s=sha: store.get_bytes(original_key(s))), sha256=sha,
                           category="dress") for k, sha in enumerate(shas)]
        labels = ann.annotate_images(items)
        log = srv.requests()
    return ann, labels, log, calls


def test_the_annotator_sends_the_stored_inputs_without_fitting(shop, monkeypatch):
    store, originals, shas = shop
    names = ["jpeg", "png", "small"]
    fit_inputs(store, [shas[n] for n in names], 1280)
    ann, labels, log, calls = _annotate(store, [shas[n] for n in names], monkeypatch, fitted_store=store)
    assert [lb.status for lb in labels] == ["labelled"] * 3
    assert calls == [] and ann.fitted_reads == 3
    assert len(log) == 6  # attributes and judge per item, both with the stored bytes
    stored = {store.get_bytes(fitted_key(shas[n], 1280, FIT_METHOD)) for n in names}
    urls = {read_fitted(b, 1280).data_url for b in stored}
    assert {r["image_sha256"] for r in log} == {hashlib.sha256(u.encode()).hexdigest() for u in urls}
    sizes = sorted(tuple(r["image_size"]) for r in log)
    assert sizes == sorted(2 * [Image.open(io.BytesIO(b)).size for b in stored])


def test_unsound_or_missing_stored_inputs_are_fitted_from_the_original(shop, monkeypatch):
    store, originals, shas = shop
    # a stored input that does not parse, and one too large for the budget: neither is sent
    store.put_bytes(fitted_key(shas["jpeg"], 1280, FIT_METHOD), b"\xff\xd8 broken")
    store.put_bytes(fitted_key(shas["png"], 1280, FIT_METHOD), _photo(2000, 2000, 9))
    ann, labels, log, calls = _annotate(store, [shas["jpeg"], shas["png"], shas["small"]], monkeypatch,
                                        fitted_store=store)
    assert [lb.status for lb in labels] == ["labelled"] * 3
    assert len(calls) == 3 and ann.fitted_reads == 0  # the small one was never fitted into the store
    for r in log:
        w, h = r["image_size"]
        assert w * h <= 2000 * 2000 and (w, h) != (2000, 2000)
    # without a fitted store the annotator fits as before
    ann, labels, log, calls = _annotate(store, [shas["jpeg"]], monkeypatch)
    assert len(calls) == 1 and ann.fitted_reads == 0 and labels[0].status == "labelled"


def _png_header_only(w: int, h: int) -> bytes:
    """A PNG whose header claims ``w`` x ``h`` 8-bit RGB and whose pixel data is a few bytes: a decompression bomb
    as a shop could serve it."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_bombs_and_odd_shas_are_counted_never_decoded_or_raised(tmp_path, monkeypatch):
    """A PNG claiming 10000 x 10000 pixels is refused from its header (its pixels are never decoded, not even to
    read EXIF), with the same reason in one thread or beside other decodes, and no warnings filter is left behind;
    strings that are not a sha256 are counted, not raised."""
    import warnings

    from PIL import PngImagePlugin

    store = LocalStore(tmp_path / "store")
    bomb = _png_header_only(10_000, 10_000)
    shas = [sha256_hex(bomb)]
    store.put_bytes(original_key(shas[0]), bomb)
    for k in range(8):  # PNGs decoded in the other threads at the same time
        data = _photo(900, 1200, 50 + k, "PNG")
        shas.append(sha256_hex(data))
        store.put_bytes(original_key(shas[-1]), data)
    loads = []
    real_load = PngImagePlugin.PngImageFile.load
    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load",
                        lambda im: loads.append(im.size) or real_load(im))
    assert read_fitted(bomb, 1280) is None and (10_000, 10_000) not in loads
    filters = list(warnings.filters)
    odd = ["", "../x", "ab/../..", "x\x00y", "F" * 64, "0" * 63, None, 7]
    counts = fit_inputs(store, shas + odd, 1280, workers=4)
    assert (10_000, 10_000) not in loads
    assert counts.refused == {"image_decompression_bomb": 1} and counts.fitted == 8
    assert counts.unreadable == {"bad_sha256": len(odd)}
    assert counts.images == counts.fitted + counts.reused + sum(counts.refused.values()) \
        + sum(counts.unreadable.values())
    assert list(warnings.filters) == filters


def test_stored_inputs_are_created_once_and_unsound_ones_replaced(shop, monkeypatch):
    """A key another writer creates between the check and the write is kept (counted reused); a stored input that is
    cut off, or over the budget, is replaced by the right bytes (counted fitted and repaired), after which the
    annotator reads it from the store."""
    store, originals, shas = shop
    key = fitted_key(shas["jpeg"], 1280, FIT_METHOD)
    right = payload(prepare_image(originals["jpeg"], None, 1280))[0]
    real_exists = store.exists
    raced = []

    def exists_then_raced(k):  # another writer stores the input just after this check
        if k == key and not raced:
            raced.append(k)
            store.put_bytes(key, right)
            return False
        return real_exists(k)

    monkeypatch.setattr(store, "exists", exists_then_raced)
    counts = fit_inputs(store, [shas["jpeg"]], 1280, workers=1)
    assert raced and counts.reused == 1 and counts.fitted == 0 and store.get_bytes(key) == right
    monkeypatch.setattr(store, "exists", real_exists)

    store.put_bytes(key, right[:2000])  # cut off: the header still parses
    assert read_fitted(right[:2000], 1280) is None
    png_key = fitted_key(shas["png"], 1280, FIT_METHOD)
    store.put_bytes(png_key, _photo(2000, 2000, 9))  # a whole image, over the budget
    counts = fit_inputs(store, [shas["jpeg"], shas["png"]], 1280, workers=2)
    assert counts.fitted == 2 and counts.repaired == 2 and counts.reused == 0
    assert store.get_bytes(key) == right
    assert read_fitted(store.get_bytes(png_key), 1280) is not None
    ann, labels, log, calls = _annotate(store, [shas["jpeg"], shas["png"]], monkeypatch, fitted_store=store)
    assert calls == [] and ann.fitted_reads == 2 and [lb.status for lb in labels] == ["labelled"] * 2


def test_budgets_past_the_servers_cap_are_refused():
    from pydantic import ValidationError

    from lookbench_pipeline.config import load_config
    from lookbench_pipeline.vlm import MAX_IMAGE_TOKENS

    assert MAX_IMAGE_TOKENS == 16384
    with pytest.raises(ValueError, match="16..16384"):
        prepare_image(_photo(300, 400, 1), None, 20_000)
    with pytest.raises(ValueError, match="16..16384"):
        fit_inputs(LocalStore.__new__(LocalStore), [], 20_000)
    with pytest.raises((ValidationError, ValueError)):
        load_config(annotate={"max_image_tokens": 20_000})
    with pytest.raises(ValueError, match="16..16384"):
        VlmAnnotator("http://127.0.0.1:9/v1", MODEL, Taxonomy.load(), max_image_tokens=20_000, max_model_len=40_000)
