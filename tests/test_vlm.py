"""The VLM annotation client (lookbench_pipeline.vlm) against a scripted OpenAI-compatible server on 127.0.0.1:
image preparation, schemas, provenance, the cache (re-runs and a resume after a kill), faults, the judge."""

from __future__ import annotations

import base64
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from PIL import Image

from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.demo.scripted_openai import FAULT_REASONS, ScriptedOpenAI, default_answer
from lookbench_pipeline.vlm import (ImageItem, ImageRefused, ResponseCache, VlmAnnotator, VlmEndpointError,
                                    VlmJudge, acceptance_check, acceptance_rates, category_schema, prepare_image,
                                    qwen_resize_target, summarize)

ROOT = Path(__file__).resolve().parents[1]
MODEL = "scripted/vlm"


@pytest.fixture(scope="module")
def tax():
    return Taxonomy.load()


def jpeg(i: int, size=(60, 90)) -> bytes:
    b = io.BytesIO()
    Image.new("RGB", size, (i * 37 % 256, i * 11 % 256, (i * 101 + 50) % 256)).save(b, "JPEG", quality=95)
    return b.getvalue()


def items(n: int, category: str | None = "dress", offset: int = 0) -> list[ImageItem]:
    return [ImageItem(f"item-{i}", jpeg(i + offset), category=category) for i in range(n)]


def annotator(url: str, tax: Taxonomy, **kw) -> VlmAnnotator:
    kw.setdefault("backoff_s", 0.001)
    kw.setdefault("max_backoff_s", 0.01)
    kw.setdefault("retry_seed", 0)
    return VlmAnnotator(url, MODEL, tax, **kw)


def valid(tax: Taxonomy, label) -> bool:
    """A stored label is valid for its category's schema (every value allowed; not-visible answers left out)."""
    return tax.validate_labels(label.category, label.attributes) == []


# ----------------------------------------------------------------------------------------- image limits


# (width, height, max tokens) -> (width, height) from transformers 5.24's
# `transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize(h, w, factor=28, min_pixels=4*28*28,
# max_pixels=tokens*28*28)` (the processor vLLM uses for Qwen2.5-VL); importing transformers takes longer than this
# whole file, so the reference values are recorded here.
SMART_RESIZE = [
    (28, 28, 1280, 56, 56), (27, 29, 1280, 56, 84), (14, 14, 1280, 56, 56), (56, 56, 4, 56, 56),
    (100, 5000, 1280, 112, 5012), (5000, 25, 1280, 5012, 28), (1920, 1080, 1280, 1316, 728),
    (1080, 1920, 16384, 1092, 1932), (4032, 3024, 1280, 1148, 840), (4032, 3024, 256, 504, 364),
    (3000, 4000, 64, 168, 252), (6000, 6000, 16384, 3584, 3584), (41, 43, 1280, 56, 84), (300, 301, 4, 28, 56),
    (1977, 4882, 16384, 1988, 4872), (1096, 3058, 16384, 1092, 3052), (3911, 5153, 16384, 3108, 4088),
    (564, 4989, 256, 140, 1316), (3871, 2152, 16384, 3864, 2156), (1947, 1598, 16384, 1960, 1596),
    (3880, 4459, 16384, 3332, 3836), (3930, 3281, 16384, 3920, 3276), (1261, 1927, 16384, 1260, 1932),
    (1270, 4313, 1280, 532, 1820), (152, 5528, 256, 56, 2688), (1333, 4870, 256, 224, 840),
    (2495, 282, 1280, 2492, 280), (3900, 4900, 16384, 3192, 4004), (3203, 5878, 1280, 728, 1344),
    (3263, 5992, 16384, 2632, 4844), (3670, 1126, 1280, 1792, 532), (826, 321, 256, 700, 252),
    (4082, 1805, 1280, 1484, 644), (5533, 3601, 16384, 4424, 2884), (2494, 3478, 16384, 2492, 3472),
    (3189, 4730, 1280, 812, 1204), (4403, 4820, 1280, 952, 1036), (4814, 1931, 1280, 1568, 616),
    (5614, 262, 1280, 4620, 196), (4990, 5527, 16384, 3388, 3752),
]


@pytest.mark.parametrize("w,h,tokens,tw,th", SMART_RESIZE)
def test_resize_target_is_qwens_smart_resize(w, h, tokens, tw, th):
    assert qwen_resize_target(w, h, tokens * 28 * 28) == (tw, th)


def test_resize_target_refuses_what_the_processor_refuses():
    with pytest.raises(ValueError, match="aspect ratio"):
        qwen_resize_target(1, 201, 1280 * 784)
    with pytest.raises(ValueError):
        qwen_resize_target(0, 10, 1280 * 784)


def _decoded_size(data_url: str) -> tuple[int, int]:
    return Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).size


@pytest.mark.parametrize("size,cap", [((10, 300), 1280), ((3, 3), 1280), ((2000, 1500), 1280), ((2000, 1500), 64),
                                      ((57, 29), 1280), ((1200, 1600), 16384)])
def test_prepared_images_fit_qwen(size, cap):
    b = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(b, "PNG")
    p = prepare_image(b.getvalue(), max_image_tokens=cap)
    assert p.width % 28 == 0 and p.height % 28 == 0 and min(p.width, p.height) >= 28
    assert 4 <= p.tokens == (p.width // 28) * (p.height // 28) <= cap
    assert p.upscaled == (min(size) < 28)
    # what is sent, the server's processor (max_pixels 12845056 for Qwen2.5-VL) resizes to exactly width x height:
    # the client's JPEG of that size, or the source bytes themselves when they already fit (passthrough)
    sent = _decoded_size(p.data_url)
    assert qwen_resize_target(*sent, 12845056) == (p.width, p.height)
    assert p.passthrough == (size in ((57, 29), (1200, 1600)))  # these two fit the cap as they are
    assert sent == (size if p.passthrough else (p.width, p.height))
    if size == (2000, 1500):
        assert p.tokens >= 0.8 * cap  # the cap is used, not wasted


def test_refused_images_carry_a_reason():
    b = io.BytesIO()
    Image.new("RGB", (2, 500), (0, 0, 0)).save(b, "PNG")
    with pytest.raises(ImageRefused) as e:
        prepare_image(b.getvalue())
    assert e.value.reason == "aspect_ratio_over_200"
    with pytest.raises(ImageRefused) as e:
        prepare_image(b"not an image at all")
    assert e.value.reason == "image_not_an_image"
    with pytest.raises(ImageRefused) as e:
        prepare_image(jpeg(1), box=(50, 50, 40, 80))
    assert e.value.reason == "bad_box"
    p = prepare_image(jpeg(1, (300, 400)), box=(10, 20, 110, 220))
    assert p.source_size == (100, 200) and not p.passthrough  # a box is always cropped by the client


def _encoded(img: Image.Image, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def test_passthrough_sends_the_source_only_when_the_server_can_take_it_unchanged():
    """The fast path sends the source bytes when nothing needs doing but the processor's own resize; anything that
    needs the client (rotation, colour profile, alpha, CMYK, palette, a cap the source exceeds, a truncated file)
    goes the full way, and a truncated file is still refused with its reason, before any request."""
    from PIL import ImageCms

    rgb = Image.new("RGB", (150, 210), (120, 30, 60))
    plain = _encoded(rgb, "JPEG", quality=90)
    p = prepare_image(plain, max_image_tokens=256)
    assert p.passthrough and base64.b64decode(p.data_url.split(",", 1)[1]) == plain
    assert (p.width, p.height, p.tokens) == (140, 224, 40) == (*qwen_resize_target(150, 210, 12845056), 40)
    assert prepare_image(_encoded(rgb, "WEBP"), max_image_tokens=256).data_url.startswith("data:image/webp;")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees: the client transposes it
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    for data in (_encoded(rgb, "JPEG", exif=exif), _encoded(rgb, "JPEG", icc_profile=srgb),
                 _encoded(rgb.convert("RGBA"), "PNG"), _encoded(rgb.convert("CMYK"), "JPEG"),
                 _encoded(rgb.convert("P"), "PNG"), _encoded(Image.new("RGB", (1000, 1000)), "PNG")):
        q = prepare_image(data, max_image_tokens=256)
        assert not q.passthrough and q.data_url.startswith("data:image/jpeg;")
        assert _decoded_size(q.data_url) == (q.width, q.height) and q.tokens <= 256
    rotated = prepare_image(_encoded(rgb, "JPEG", exif=exif), max_image_tokens=256)
    assert (rotated.width, rotated.height) == (224, 140)  # the oriented image, as the intake sees it
    with pytest.raises(ImageRefused) as e:
        prepare_image(plain[: len(plain) // 2], max_image_tokens=256)
    assert e.value.reason in ("image_truncated", "image_decode_error")


def _photo(w: int, h: int, seed: int = 0) -> Image.Image:
    """A smooth photo-like picture with an asymmetric mark (so that a wrong rotation or flip shows)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 64 + 2, w // 64 + 2, 3)).astype(np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC)
    img.paste((250, 10, 10), (w // 10, h // 12, w // 3, h // 5))  # red block near the top left
    return img


def _mean_diff(a, b) -> float:
    import numpy as np

    return float(np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).mean())


@pytest.mark.parametrize("orientation", [1, 2, 3, 4, 5, 6, 7, 8])
def test_fast_jpeg_decode_orients_like_the_intake(orientation):
    """The libjpeg-turbo path (vlm.fit._jpeg_pixels) shows a JPEG with any EXIF orientation as images.decode does
    (Pillow's exif_transpose), and the fitted size is the processor's size of the oriented image."""
    import numpy as np

    from lookbench_pipeline.images import decode
    from lookbench_pipeline.vlm import _jpeg_pixels

    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _encoded(_photo(300, 200), "JPEG", quality=95, exif=exif)
    fast, w, h = _jpeg_pixels(data, None, 1280 * 784)
    ref = decode(data)
    assert (w, h) == (ref.width, ref.height) == ((200, 300) if orientation >= 5 else (300, 200))
    assert fast.shape == (h, w, 3) and _mean_diff(fast, np.asarray(ref.rgb)) < 1.0
    p = prepare_image(data, max_image_tokens=64)
    assert (p.width, p.height) == qwen_resize_target(w, h, 64 * 784) == _decoded_size(p.data_url)


def test_large_jpegs_decode_at_a_dct_reduction_that_still_covers_the_target():
    """A 4000 x 3000 JPEG for a 1280-token budget (1,003,520 pixels) is decoded at 1/2 (2000 x 1500 >= the target
    1148 x 868), not 1/4 (1000 x 750 < target); a crop is decoded at the reduction its own target allows; the
    result keeps the processor's size and the picture (against a full decode, resized)."""
    import numpy as np

    from lookbench_pipeline.images import decode
    from lookbench_pipeline.vlm import _jpeg_pixels

    img = _photo(4000, 3000, seed=1)
    data = _encoded(img, "JPEG", quality=92)
    a, w, h = _jpeg_pixels(data, None, 1280 * 784)
    assert (w, h) == (4000, 3000) and a.shape == (1500, 2000, 3)
    p = prepare_image(data)
    assert (p.width, p.height) == qwen_resize_target(4000, 3000, 1280 * 784) == _decoded_size(p.data_url)
    sent = Image.open(io.BytesIO(base64.b64decode(p.data_url.split(",", 1)[1]))).convert("RGB")
    assert _mean_diff(sent, img.resize(sent.size, Image.Resampling.LANCZOS)) < 3.0
    box = (1000, 500, 1400, 1100)  # 400 x 600 crop: target 392 x 588, decodable at 1/1 only
    a, _, _ = _jpeg_pixels(data, box, 1280 * 784)
    assert a.shape == (3000, 4000, 3)
    q = prepare_image(data, box=box)
    assert q.source_size == (400, 600) and (q.width, q.height) == qwen_resize_target(400, 600, 1280 * 784)
    crop = Image.open(io.BytesIO(base64.b64decode(q.data_url.split(",", 1)[1]))).convert("RGB")
    assert _mean_diff(crop, img.crop(box).resize(crop.size, Image.Resampling.LANCZOS)) < 3.0
    small_budget = prepare_image(data, max_image_tokens=64)  # 1/8 still covers 252 x 196... and is used
    assert (small_budget.width, small_budget.height) == qwen_resize_target(4000, 3000, 64 * 784)
    # images.decode's own reduction for the paths Pillow handles (e.g. a CMYK or non-sRGB JPEG)
    dec = decode(data, min_size=(1148, 868))
    assert (dec.width, dec.height) == (4000, 3000) and dec.rgb.size == (2000, 1500)
    assert decode(data, min_size=(2100, 868)).rgb.size == (4000, 3000)  # 1/2 would be too narrow


def test_fast_jpeg_decode_leaves_odd_files_to_the_full_path():
    from PIL import ImageCms

    from lookbench_pipeline.vlm import _jpeg_pixels

    rgb = _photo(300, 200)
    adobe = ImageCms.ImageCmsProfile(ImageCms.createProfile("LAB")).tobytes()
    assert _jpeg_pixels(_encoded(rgb, "JPEG", icc_profile=adobe), None, 1280 * 784) is None  # converted by decode
    assert _jpeg_pixels(_encoded(rgb.convert("CMYK"), "JPEG"), None, 1280 * 784) is None
    assert _jpeg_pixels(_encoded(rgb, "PNG"), None, 1280 * 784) is None
    plain = _encoded(rgb, "JPEG")
    assert _jpeg_pixels(plain[: len(plain) * 2 // 3], None, 1280 * 784) is None  # truncated: strict libjpeg
    with pytest.raises(ImageRefused) as e:
        prepare_image(plain[: len(plain) * 2 // 3], box=(0, 0, 100, 100))
    assert e.value.reason == "image_truncated"
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    assert _jpeg_pixels(_encoded(rgb, "JPEG", icc_profile=srgb), None, 1280 * 784) is not None


# ---------------------------------------------------------------------------------------------- schemas


def test_schemas_are_strict_and_category_specific(tax):
    for name in tax.categories:
        s = tax.json_schema(name)
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["additionalProperties"] is False and set(s["required"]) == set(s["properties"])
        for a, prop in s["properties"].items():
            assert prop["enum"][-1] == tax.not_visible
            assert set(prop["enum"][:-1]) == set(tax.allowed(name, a))
    assert "full_length" not in tax.json_schema("skirt")["properties"]["length"]["enum"]
    assert "full_length" in tax.json_schema("trousers")["properties"]["length"]["enum"]
    assert set(category_schema(tax)["properties"]["category"]["enum"]) == set(tax.categories) | {"none"}


# ------------------------------------------------------------------------------------ a good server


def test_labels_provenance_and_request_shape(tax, tmp_path):
    with ScriptedOpenAI(MODEL, version="0.32.0") as srv:
        ann = annotator(srv.url, tax, cache=tmp_path / "c.sqlite", concurrency=4, max_image_tokens=256,
                        extra_body={"structured_outputs": {"disable_any_whitespace": True}}, temperature=0.0)
        labels = ann.annotate_images(items(6) + items(3, category=None, offset=100))
        log = srv.requests()
    assert [lb.item_id for lb in labels] == [f"item-{i}" for i in range(6)] + [f"item-{i}" for i in range(3)]
    assert all(lb.status == "labelled" and valid(tax, lb) for lb in labels)
    lb = labels[0]
    assert lb.category == "dress" and lb.model == MODEL and lb.server_version == "0.32.0"
    assert lb.prompt_version and lb.sampling == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": 0}
    assert lb.annotator == f"vlm:{MODEL}@{lb.prompt_version}" and lb.image_sha256 and lb.requests == 1
    assert lb.attributes or lb.not_visible
    row = lb.row()
    assert json.loads(row["sampling"])["max_tokens"] == 512 and row["judge_verdicts"] == []
    # 6 attribute requests + 3 x (category + attributes)
    assert len(log) == 12 and sum(x.requests for x in labels) == 12
    assert sum(r["schema"].startswith("lookbench_category") for r in log) == 3
    for r in log:
        assert r["extra"] == {"structured_outputs": {"disable_any_whitespace": True}}
        # 60 x 90 JPEGs fit as they are: sent byte for byte, the server's processor makes them 56 x 84 (6 tokens)
        assert tuple(r["image_size"]) == (60, 90)
        assert qwen_resize_target(60, 90, 12845056) == (56, 84)
    # what the model answered is what was stored (minus "not visible")
    for lbl in labels[:6]:
        assert set(lbl.attributes) | set(lbl.not_visible) == set(tax.categories["dress"].attributes)


def test_a_rerun_sends_no_request(tax, tmp_path):
    with ScriptedOpenAI(MODEL) as srv:
        first = annotator(srv.url, tax, cache=tmp_path / "c.sqlite").annotate_images(items(8))
        n = len(srv.log)
        again = annotator(srv.url, tax, cache=tmp_path / "c.sqlite").annotate_images(items(8))
        assert len(srv.log) == n == 8
    assert [a.attributes for a in again] == [f.attributes for f in first]
    assert all(a.requests == 0 and a.cached == 1 for a in again)
    # a fully cached run needs no server at all
    gone = annotator("http://127.0.0.1:9/v1", tax, cache=tmp_path / "c.sqlite", max_retries=0)
    assert [a.attributes for a in gone.annotate_images(items(8))] == [f.attributes for f in first]


RESUME_SCRIPT = """
import io, sys
from PIL import Image
from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.vlm import ImageItem, VlmAnnotator
def jpeg(i):
    b = io.BytesIO(); Image.new("RGB", (60, 90), (i * 37 % 256, i * 11 % 256, (i * 101 + 50) % 256)).save(b, "JPEG", quality=95)
    return b.getvalue()
items = [ImageItem(f"item-{i}", jpeg(i), category=None) for i in range(int(sys.argv[3]))]
VlmAnnotator(sys.argv[1], "scripted/vlm", Taxonomy.load(), cache=sys.argv[2], concurrency=2).annotate_images(items)
print("finished")
"""


def test_resume_after_a_kill_sends_no_stored_request_again(tax, tmp_path):
    """Kill a run mid-way (SIGKILL), resume it: every answer stored before the kill is not asked again, every
    other question is asked once."""
    n_items = 30
    cache = tmp_path / "c.sqlite"
    with ScriptedOpenAI(MODEL, latency_s=0.05) as srv:
        proc = subprocess.Popen([sys.executable, "-c", RESUME_SCRIPT, srv.url, str(cache), str(n_items)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while len(srv.log) < 20 and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        before = len(srv.log)
        stored = ResponseCache(cache)
        n_stored = stored.count()
        stored.close()
        assert 0 < n_stored < 2 * n_items and before < 2 * n_items  # killed mid-way
        labels = annotator(srv.url, tax, cache=cache).annotate_images(items(n_items, category=None))
        after = len(srv.log) - before
    assert all(lb.status == "labelled" for lb in labels)
    # every item needs a category and an attributes answer: 2 * n_items questions in all
    assert after == 2 * n_items - n_stored
    assert sum(lb.requests for lb in labels) == after


# ------------------------------------------------------------------------------------------------ faults


@pytest.mark.parametrize("fault", ["malformed_json", "truncated", "schema_invalid", "http_500", "http_400", "slow",
                                   "drop"])
def test_each_fault_at_20_percent_is_recorded(tax, fault):
    """Without retries every injected fault fails exactly one item, with the fault's reason; nothing else fails
    and every stored label is schema-valid."""
    with ScriptedOpenAI(MODEL, faults={fault: 0.2}, seed=7, slow_s=5.0) as srv:
        labels = annotator(srv.url, tax, max_retries=0, timeout_s=2.0, concurrency=16).annotate_images(items(60))
        injected = srv.counts[fault]
        sent = len(srv.log)
    assert injected >= 4
    c = summarize(labels)
    assert c["items"] == 60 == c["labelled"] + c["failed"] and c["rejected"] == 0
    assert c["failed"] == injected and c["requests"] == sent == 60
    assert {lb.reason for lb in labels if lb.status == "failed"} == {f"attributes:{FAULT_REASONS[fault]}"}
    assert all(valid(tax, lb) for lb in labels if lb.status == "labelled")


def test_all_faults_mixed_with_retries(tax):
    """Every kind of fault, 50% of all requests, with a category and an attributes question per item and bounded
    retries: the run finishes, every stored label is schema-valid, every failure has its reason, and the client's
    request count reconciles with the server's log."""
    faults = {"malformed_json": 0.08, "truncated": 0.08, "schema_invalid": 0.08, "http_500": 0.1, "slow": 0.08,
              "drop": 0.08}
    with ScriptedOpenAI(MODEL, faults=faults, seed=11, slow_s=0.8) as srv:
        labels = annotator(srv.url, tax, max_retries=4, timeout_s=0.4, concurrency=16).annotate_images(
            items(50, category=None))
        sent, counts = len(srv.log), dict(srv.counts)
    c = summarize(labels)
    assert c["items"] == c["labelled"] + c["rejected"] + c["failed"] == 50
    assert c["requests"] == sent == sum(counts.values())
    assert sum(v for k, v in counts.items() if k != "ok") >= 0.3 * sent  # faults really happened
    assert c["labelled"] >= 40
    for lb in labels:
        if lb.status == "labelled":
            assert valid(tax, lb)
        else:
            assert lb.status == "failed" and lb.reason.split(":")[1] in set(FAULT_REASONS.values())
    # retried questions: a failed item used max_retries + 1 requests on its failing question
    assert all(lb.requests >= 5 for lb in labels if lb.status == "failed")


def _completion(content) -> dict:
    return {"id": "x", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}


# Replies no schema-constrained server should send, each of which once escaped ``annotate_images`` as an exception
# and lost the batch: (the raw response body, the reason recorded).
HOSTILE = {
    "nested_past_recursion_limit": (json.dumps(_completion('{"category":' + "[" * 100_000 + "]" * 100_000 + "}")),
                                    "invalid_json"),
    "int_past_digit_limit": (json.dumps(_completion('{"category":' + "7" * 5000 + "}")), "invalid_json"),
    "choices_not_a_list": (json.dumps({**_completion(""), "choices": "nope"}), "bad_response"),
    "content_an_object": (json.dumps(_completion({"category": "top"})), "bad_response"),
    "content_a_list": (json.dumps(_completion(["top"])), "bad_response"),
    "body_nested_past_recursion_limit": ('{"id":"x","choices":' + "[" * 100_000 + "]" * 100_000 + "}",
                                         "bad_response"),
}


class _HostileServer:
    """An OpenAI-compatible server answering schema-valid answers (:func:`default_answer`), except that the first
    ``hostile`` requests of ``question`` (``category`` or ``judge``, told by the schema's title) get ``body`` as the
    raw response."""

    def __init__(self, question: str, body: str, hostile: int = 1):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer, lock = self, threading.Lock()
        target = "_judge_v" if question == "judge" else "lookbench_category_v"
        self.left, self.sent = hostile, 0

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.reply(json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                schema = req["response_format"]["json_schema"]["schema"]
                with lock:
                    outer.sent += 1
                    hit = outer.left > 0 and target in schema["title"]
                    outer.left -= hit
                if hit:
                    self.reply(body.encode())
                else:
                    content = json.dumps(default_answer(schema, req))
                    self.reply(json.dumps(_completion(content)).encode())

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def __enter__(self) -> "_HostileServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.mark.parametrize("question", ["category", "judge"])
@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_hostile_replies_fail_one_item_not_the_batch(tax, shape, question):
    """A reply that cannot be parsed or validated however it is malformed (nesting past the recursion limit, an
    integer past Python's digit limit, a response whose ``choices`` is not a list, a ``content`` that is not a
    string) fails its item with a reason, on the category question as on the judge's; the other items are
    labelled and the counts reconcile."""
    body, reason = HOSTILE[shape]
    with _HostileServer(question, body) as srv:
        judge = VlmJudge(srv.url, MODEL) if question == "judge" else None
        labels = annotator(srv.url, tax, max_retries=0, judge=judge, concurrency=1).annotate_images(
            items(3, category=None))
        sent = srv.sent
    c = summarize(labels)
    assert c["items"] == 3 == c["labelled"] + c["rejected"] + c["failed"] and c["failed"] == 1
    assert [lb.reason for lb in labels if lb.status == "failed"] == [f"{question}:{reason}"]
    assert c["labelled"] + c["rejected"] == 2 and c["requests"] == sent


def test_http_400_is_not_retried(tax):
    with ScriptedOpenAI(MODEL, faults={"http_400": 1.0}) as srv:
        labels = annotator(srv.url, tax, max_retries=5).annotate_images(items(3))
        assert len(srv.log) == 3
    assert all(lb.reason == "attributes:http_400" and lb.requests == 1 for lb in labels)


def test_endpoint_problems_are_clear_errors(tax):
    with pytest.raises(VlmEndpointError, match="unreachable"):
        annotator("http://127.0.0.1:9/v1", tax, max_retries=1, timeout_s=2).annotate_images(items(1))
    with ScriptedOpenAI("another/model") as srv:
        with pytest.raises(VlmEndpointError, match="does not serve model"):
            annotator(srv.url, tax).annotate_images(items(1))
    with pytest.raises(ValueError, match="max_model_len"):
        annotator("http://127.0.0.1:9/v1", tax, max_model_len=2048, max_image_tokens=1280)


def test_bad_images_and_categories_are_rejected_not_fatal(tax):
    thin = io.BytesIO()
    Image.new("RGB", (1, 400)).save(thin, "PNG")

    def none_category(schema, body):
        return {"category": "none"} if "category" in schema["properties"] else default_answer(schema, body)

    with ScriptedOpenAI(MODEL, answer=none_category, version=None) as srv:
        labels = annotator(srv.url, tax).annotate_images([
            ImageItem("thin", thin.getvalue(), category="top"), ImageItem("junk", b"<html>", category="top"),
            ImageItem("odd", jpeg(1), category="spacesuit"), ImageItem("nothing", jpeg(2)),
            ImageItem("ok", jpeg(3), category="bag")])
    by = {lb.item_id: lb for lb in labels}
    assert by["thin"].reason == "aspect_ratio_over_200" and by["junk"].reason == "image_not_an_image"
    assert by["odd"].reason == "unknown_category:spacesuit" and by["nothing"].reason == "no_category_match"
    assert by["ok"].status == "labelled" and by["ok"].server_version is None  # no /version on this server
    assert summarize(labels)["rejected"] == 4


# -------------------------------------------------------------------------------------------------- judge


def _reject_color(schema, body):
    props = schema["properties"]
    if {p["enum"][0] for p in props.values()} == {"accept"}:  # a judge's schema
        text = body["messages"][-1]["content"][-1]["text"]
        color_line = next(line for line in text.splitlines() if line.startswith("- color"))
        return {a: ("reject" if a == "color" and color_line.endswith(": red") else "accept") for a in props}
    if "category" in props:
        return {"category": "top"}
    out = default_answer(schema, body)
    if "color" in out:
        # first answer red; when asked again (the rejected value is excluded from the enum) black
        out["color"] = "red" if "red" in props["color"]["enum"] else "black"
    return out


@pytest.mark.parametrize("on_reject", ["drop", "reannotate"])
def test_judge_drops_or_reannotates_rejected_labels(tax, on_reject):
    with ScriptedOpenAI(MODEL, answer=_reject_color) as srv:
        ann = annotator(srv.url, tax, judge=VlmJudge(srv.url, MODEL), on_reject=on_reject)
        labels = ann.annotate_images(items(4, category="top"))
        log = srv.requests()
    for lb in labels:
        assert lb.status == "labelled" and lb.judge_model == MODEL and "+judge:" in lb.annotator
        first = {v["name"]: v for v in lb.verdicts if v["round"] == 1}
        assert first["color"] == {"name": "color", "value": "red", "verdict": "reject", "round": 1}
        assert all(v["verdict"] == "accept" for k, v in first.items() if k != "color")
        if on_reject == "drop":
            assert "color" not in lb.attributes and len(lb.verdicts) == len(first)
        else:
            assert lb.attributes["color"] == "black"
            assert {"name": "color", "value": "black", "verdict": "accept", "round": 2} in lb.verdicts
    if on_reject == "reannotate":
        re = [r for r in log if "reannotate" in r["schema"]]
        assert len(re) == 4
    rates = acceptance_rates([lb.row() for lb in labels])
    n_attrs = len(labels[0].verdicts) - (1 if on_reject == "reannotate" else 0)
    assert rates["judged"] == 4 * n_attrs and rates["by_attribute"]["color"] == 0.0
    assert rates["overall"] == pytest.approx((n_attrs - 1) / n_attrs) and rates["by_category"] == {
        "top": pytest.approx((n_attrs - 1) / n_attrs)}


def test_acceptance_check_threshold():
    rows = [{"category": "top", "judge_verdicts": [{"name": "color", "value": "red", "verdict": v, "round": 1}]}
            for v in ["accept"] * 9 + ["reject"]]
    rates = acceptance_rates(rows)
    assert rates["overall"] == 0.9
    assert acceptance_check(rates, 0.9)[0] and not acceptance_check(rates, 0.93)[0]
    assert acceptance_check(None, 0.9)[0]  # no judge: nothing to fail
    assert not acceptance_check(acceptance_rates(rows[-2:]), 0.9)[0]


def test_fitted_images_are_made_once_per_image_and_budget(tax, monkeypatch):
    """Three items of one 3 MP photo, each asked and judged (6 requests): the photo is fitted once (items in flight
    together share the preparation), and a later run of the same annotator fits nothing again; a crop of the same
    photo is a different fitted image."""
    from lookbench_pipeline import vlm
    from lookbench_pipeline.vlm import annotator as vlm_annotator

    calls = []
    real = vlm.prepare_image
    monkeypatch.setattr(vlm_annotator, "prepare_image", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    photo = _encoded(_photo(1500, 2000), "JPEG", quality=90)
    with ScriptedOpenAI(MODEL) as srv:
        ann = annotator(srv.url, tax, judge=VlmJudge(srv.url, MODEL))
        labels = ann.annotate_images([ImageItem(f"same-{k}", photo, category="dress") for k in range(3)])
        assert [lb.status for lb in labels] == ["labelled"] * 3 and sum(lb.requests for lb in labels) == 6
        assert len(calls) == 1 and len(ann.fitted) == 1
        ann.annotate_images([ImageItem("again", photo, category="top"),
                             ImageItem("crop", photo, box=(100, 100, 900, 1500), category="top")])
        assert len(calls) == 2 and len(ann.fitted) == 2 and ann.fitted.hits >= 1
    small = vlm.FittedCache(max_bytes=10)
    small.put(("a", None, 1280), real(jpeg(1)))  # larger than the bound: not kept
    assert len(small) == 0
