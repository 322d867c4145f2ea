"""Attribute annotation by a vision-language model (production: Qwen2.5-VL-72B-Instruct served by vLLM) through any
OpenAI-compatible endpoint, and a judge model that verifies every label. docs/ANNOTATION.md is the user's guide.

The pieces:

* :func:`prepare_image` fits an image to Qwen2.5-VL's limits before it is sent (see there for the formula);
* :class:`VlmAnnotator` asks the model for the category (unless one is given) and for the category's attributes,
  with the category's JSON schema (:meth:`Taxonomy.json_schema`) as the structured-output constraint
  (``response_format={"type": "json_schema", ...}``, vLLM's structured-outputs API); every answer is validated
  against the schema with ``jsonschema``; invalid JSON, a schema violation, ``finish_reason`` other than
  ``stop``, HTTP errors, dropped connections and timeouts are retried with exponential backoff a bounded number
  of times, then recorded as a failure with its reason — one bad response never ends a run;
* :class:`VlmJudge` asks a judge model to accept or reject each attribute label against the image; rejected
  labels are dropped from the labels Fine matching reads (or re-annotated once, ``on_reject="reannotate"``);
* :class:`ResponseCache` (SQLite, WAL) keeps every validated answer keyed by (kind, image sha256, box, model,
  prompt version, taxonomy version, and the category / labels asked about), written as soon as it arrives: a
  re-run, or a run resumed after a crash, sends no request whose answer was stored.

Requests in flight are bounded (``concurrency``; the server batches them); the Dagster asset that runs this sits
in the ``vllm`` concurrency pool so that two runs do not overload one server.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import logging
import math
import random
import sqlite3
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .config import ImageConfig
from .images import ImageRejected, decode
from .taxonomy import Taxonomy

log = logging.getLogger(__name__)

PROMPT_VERSION = "lookbench-annotate/1"
"""Version of the annotation prompts (category, attributes, re-annotation); part of every cache key. Bump it when
a prompt's wording or the sampling parameters change."""
JUDGE_PROMPT_VERSION = "lookbench-judge/1"
"""Version of the judge prompt; part of the judge's cache keys."""

# Qwen2.5-VL's vision encoder: 14 x 14 pixel patches, 2 x 2 patches merged into one token, so one image token
# covers 28 x 28 pixels; images are resized to multiples of 28 with at least 4 tokens (56 x 56 pixels) and an
# aspect ratio of at most 200. Source: `smart_resize` in transformers'
# models/qwen2_vl/image_processing_qwen2_vl.py (used by vLLM for Qwen2.5-VL) and the Qwen2.5-VL model card.
PIXELS_PER_TOKEN_SIDE = 28
MIN_IMAGE_TOKENS = 4
MAX_ASPECT_RATIO = 200.0
NONE_CATEGORY = "none"
INLINE_PREPARE_BYTES = 64_000
ACCEPT, REJECT = "accept", "reject"


_DECODE_CFG = ImageConfig(min_side_px=1)  # sides below 28 px are upscaled here, not rejected


class VlmEndpointError(RuntimeError):
    """The endpoint cannot serve this run at all: unreachable after every retry, or the model is not served."""


class ImageRefused(Exception):
    """An image that cannot be sent to the model; ``reason`` is a short code (``aspect_ratio_over_200``...)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


# ------------------------------------------------------------------------------------------------- images


def qwen_resize_target(width: int, height: int, max_pixels: int,
                       min_pixels: int = MIN_IMAGE_TOKENS * PIXELS_PER_TOKEN_SIDE ** 2,
                       factor: int = PIXELS_PER_TOKEN_SIDE) -> tuple[int, int]:
    """The size ``(width, height)`` in pixels Qwen2.5-VL's processor resizes an image of this size to: both sides
    multiples of ``factor`` (28), the aspect ratio kept as closely as possible, the area within
    ``[min_pixels, max_pixels]``.

    This is ``smart_resize`` of transformers' Qwen2-VL image processor (also used for Qwen2.5-VL):
    ``h' = round(h / 28) * 28`` (likewise ``w'``); if ``h' w' > max_pixels``, ``beta = sqrt(h w / max_pixels)`` and
    ``h' = max(28, floor(h / beta / 28) * 28)``; if ``h' w' < min_pixels``, ``beta = sqrt(min_pixels / (h w))`` and
    ``h' = ceil(h beta / 28) * 28``. The image then costs ``(h' / 28) * (w' / 28)`` tokens.

    Raises:
        ValueError: a side is not positive, or the aspect ratio exceeds 200 (the processor refuses those).
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio {max(width, height) / min(width, height):.1f} exceeds {MAX_ASPECT_RATIO:g}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return w_bar, h_bar


def image_tokens(width: int, height: int) -> int:
    """Image tokens of an image already sized to multiples of 28 pixels (one token per 28 x 28 pixels)."""
    return (width // PIXELS_PER_TOKEN_SIDE) * (height // PIXELS_PER_TOKEN_SIDE)


@dataclass(frozen=True)
class PreparedImage:
    """An image ready to send: ``data_url`` (``data:image/<jpeg|png|webp>;base64,...``) and the size ``width`` x
    ``height`` in pixels (multiples of 28) that the server's Qwen2.5-VL processor resizes it to, so that it costs
    exactly ``tokens`` image tokens.

    ``passthrough``: the source bytes are sent as they are (the server's processor does the resize; see
    :func:`prepare_image`); otherwise the client sent a JPEG of exactly ``width`` x ``height``. ``source_size`` is
    the decoded (cropped) size before any resize, ``upscaled`` whether a side below 28 pixels was enlarged."""

    data_url: str
    width: int
    height: int
    tokens: int
    source_size: tuple[int, int]
    upscaled: bool
    passthrough: bool = False


SERVER_MAX_PIXELS = 12_845_056
"""The ``max_pixels`` default of Qwen2.5-VL's image processor (16,384 tokens; ``preprocessor_config.json`` of
Qwen/Qwen2.5-VL-*-Instruct), the most a server resizes to. A server configured with less only shrinks further."""

_PASSTHROUGH_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}


def _passthrough(data: bytes, max_image_tokens: int) -> PreparedImage | None:
    """The source bytes as they are, when the server can take them unchanged and the token count is already
    known: a single-frame JPEG, PNG or WebP, 8-bit RGB or greyscale, no alpha, no ICC profile, no EXIF rotation,
    that decodes completely, whose sides are at least 28 pixels, and whose processor size (:func:`qwen_resize_target`
    with the server's default ``max_pixels``) is the size the client would have resized it to, within
    ``max_image_tokens``. None otherwise (the caller decodes, converts and resizes it)."""
    try:
        im = Image.open(io.BytesIO(data), formats=tuple(_PASSTHROUGH_MIME))
        if (im.mode not in ("RGB", "L") or getattr(im, "n_frames", 1) != 1 or "icc_profile" in im.info
                or "transparency" in im.info or im.getexif().get(0x0112, 1) in (2, 3, 4, 5, 6, 7, 8)):
            return None
        w, h = im.size
        if min(w, h) < PIXELS_PER_TOKEN_SIDE or max(w, h) / min(w, h) > MAX_ASPECT_RATIO \
                or w * h > _DECODE_CFG.max_pixels:
            return None
        target = qwen_resize_target(w, h, max_image_tokens * PIXELS_PER_TOKEN_SIDE ** 2)
        if qwen_resize_target(w, h, SERVER_MAX_PIXELS) != target or image_tokens(*target) > max_image_tokens:
            return None
        if im.format == "JPEG":
            # decoded at 1/8 scale: every byte is still entropy-decoded, so a truncated or corrupt file still fails
            # to load, at a fraction of the cost of the full inverse DCT
            im.draft("L" if im.mode == "L" else "RGB", (max(1, w // 8), max(1, h // 8)))
        im.load()  # a truncated or corrupt file goes the slow way, which rejects it with its reason
    except Exception:  # noqa: BLE001 - any doubt: the full path decides
        return None
    url = f"data:{_PASSTHROUGH_MIME[im.format]};base64," + base64.b64encode(data).decode("ascii")
    return PreparedImage(url, target[0], target[1], image_tokens(*target), (w, h), False, passthrough=True)


_SIMPLE_JPEG_MODES = ("RGB", "L")  # Pillow's modes of YCbCr and greyscale JPEGs; CMYK / YCCK go through decode()


def _crop_box(box: Sequence[float], w: int, h: int) -> tuple[int, int, int, int]:
    """``box`` clipped to a ``w`` x ``h`` image, outward to whole pixels. Raises ImageRefused ``bad_box``."""
    if len(box) != 4 or not all(math.isfinite(float(v)) for v in box):
        raise ImageRefused("bad_box", f"{box}")
    x1, y1 = max(0, math.floor(box[0])), max(0, math.floor(box[1]))
    x2, y2 = min(w, math.ceil(box[2])), min(h, math.ceil(box[3]))
    if x2 <= x1 or y2 <= y1:
        raise ImageRefused("bad_box", f"{list(box)} on a {w}x{h} image")
    return x1, y1, x2, y2


def _decode_floor(w: int, h: int, box: Sequence[float] | None, max_pixels: int) -> tuple[int, int] | None:
    """The smallest decode size ``(width, height)`` of a ``w`` x ``h`` (oriented) image from which the crop still
    covers its target size (:func:`qwen_resize_target`); None when no reduction applies (small or odd crops)."""
    try:
        x1, y1, x2, y2 = _crop_box(box, w, h) if box is not None else (0, 0, w, h)
    except ImageRefused:
        return None
    cw, ch = x2 - x1, y2 - y1
    if min(cw, ch) < PIXELS_PER_TOKEN_SIDE or max(cw, ch) / min(cw, ch) > MAX_ASPECT_RATIO:
        return None
    tw, th = qwen_resize_target(cw, ch, max_pixels)
    return math.ceil(w * tw / cw), math.ceil(h * th / ch)


def _orient(a: np.ndarray, orientation: int) -> np.ndarray:
    """Pixels (h, w, 3) as stored -> as shown, for an EXIF orientation 1..8 (what ``ImageOps.exif_transpose``
    does)."""
    if orientation == 2:
        a = a[:, ::-1]
    elif orientation == 3:
        a = a[::-1, ::-1]
    elif orientation == 4:
        a = a[::-1]
    elif orientation == 5:
        a = a.transpose(1, 0, 2)
    elif orientation == 6:
        a = np.rot90(a, -1)
    elif orientation == 7:
        a = np.rot90(a, 1)[:, ::-1]
    elif orientation == 8:
        a = np.rot90(a, 1)
    return np.ascontiguousarray(a)


def _jpeg_pixels(data: bytes, box: Sequence[float] | None, max_pixels: int) -> tuple[np.ndarray, int, int] | None:
    """The fast decode of a plain JPEG (YCbCr or greyscale, no colour profile other than sRGB, within the pixel
    limit): libjpeg-turbo through ``simplejpeg`` straight into a numpy array, at the largest DCT reduction (1/2,
    1/4, 1/8) that still covers the crop's target size, strict (a truncated or corrupt file raises), EXIF
    orientation applied. Returns ``(pixels (h', w', 3) RGB, full width, full height)`` (oriented), or None for any
    other file (:func:`lookbench_pipeline.images.decode` then handles it and rejects a bad one with its reason)."""
    import simplejpeg

    try:
        im = Image.open(io.BytesIO(data), formats=("JPEG",))
        if im.format != "JPEG" or im.mode not in _SIMPLE_JPEG_MODES:
            return None
        sw, sh = im.size
        if sw * sh > _DECODE_CFG.max_pixels:
            return None
        icc = im.info.get("icc_profile")
        if icc:
            from PIL import ImageCms

            desc = ImageCms.getProfileDescription(ImageCms.ImageCmsProfile(io.BytesIO(icc))) or ""
            if "srgb" not in desc.lower():  # the same rule as images.decode: only non-sRGB profiles convert
                return None
        orientation = im.getexif().get(0x0112, 1)
        orientation = orientation if orientation in (2, 3, 4, 5, 6, 7, 8) else 1
        w, h = (sh, sw) if orientation in (5, 6, 7, 8) else (sw, sh)
        need = _decode_floor(w, h, box, max_pixels)
        scale = 1
        if need is not None:
            nw, nh = (need[1], need[0]) if orientation in (5, 6, 7, 8) else need
            scale = next((f for f in (8, 4, 2) if sw // nw >= f and sh // nh >= f), 1)
        if scale > 1:  # libjpeg-turbo picks the smallest output at least this large: exactly 1/scale
            a = simplejpeg.decode_jpeg(data, colorspace="RGB", min_width=-(-sw // scale),
                                       min_height=-(-sh // scale))
        else:
            a = simplejpeg.decode_jpeg(data, colorspace="RGB")
    except Exception:  # noqa: BLE001 - anything unusual: the full path decides
        return None
    return (_orient(a, orientation) if orientation != 1 else a), w, h


def _resize(a: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Pixels (h, w, 3) resized to ``size`` ``(width, height)``: first by the largest integer factor ``k`` that
    keeps both sides at least that large (a box filter over ``k x k`` blocks, OpenCV ``INTER_AREA``; the at most
    ``k - 1`` pixels of the right and bottom edges that fill no block are left out), then the factor below 2 that is
    left by bilinear interpolation (OpenCV ``INTER_LINEAR``). Measured on the real 2-3 MP photos in
    ../shared/realdata: 41-43 dB PSNR against a Lanczos resize of the full image (BENCHMARKS.md)."""
    import cv2  # opencv-python (also a dependency of ultralytics)

    h, w = a.shape[:2]
    tw, th = size
    if (w, h) == (tw, th):
        return a
    k = min(w // tw, h // th)
    if k >= 2:
        a = cv2.resize(a[: h // k * k, : w // k * k], (w // k, h // k), interpolation=cv2.INTER_AREA)
        h, w = a.shape[:2]
    if (w, h) != (tw, th):
        a = cv2.resize(a, (tw, th), interpolation=cv2.INTER_LINEAR if tw <= w and th <= h else cv2.INTER_CUBIC)
    return a


def prepare_image(data: bytes, box: Sequence[float] | None = None, max_image_tokens: int = 1280,
                  jpeg_quality: int = 90) -> PreparedImage:
    """Fit an image to Qwen2.5-VL's limits, so that it costs at most ``max_image_tokens`` image tokens whatever the
    server's own ``max_pixels`` (vLLM's server refuses a per-request ``max_pixels`` with HTTP 400; the client must
    send an image that already fits).

    Fast path: a whole image (no ``box``) that the server can take as it is (:func:`_passthrough`: a plain 8-bit
    JPEG/PNG/WebP that decodes, no rotation, no colour profile, and whose processor size is within the cap) is
    sent byte for byte; the server's processor then resizes it to ``width`` x ``height``, exactly as the slow path
    would have (``passthrough=True``). This saves the resize and the JPEG re-encode (BENCHMARKS.md).

    Otherwise the pixels are decoded — a plain JPEG by :func:`_jpeg_pixels` (libjpeg-turbo into numpy, at the
    largest DCT reduction that still covers the target size), anything else by
    :func:`lookbench_pipeline.images.decode` (EXIF orientation, CMYK/ICC to sRGB, alpha on white; a JPEG there too
    at such a reduction, ``min_size``) — cropped to ``box`` (pixels ``[x1, y1, x2, y2]`` on the oriented full-size
    image; clipped to the image), and

    * an aspect ratio above 200 is refused (``aspect_ratio_over_200``): the processor raises on it;
    * a side below 28 pixels is upscaled (bicubic, aspect kept) so that the short side is 28 pixels;
    * the size is then set with :func:`qwen_resize_target` (on the crop's full-resolution size) with
      ``max_pixels = max_image_tokens * 28 * 28``, the pixels resized (:func:`_resize`) and encoded as a JPEG of
      exactly that size (libjpeg-turbo, 4:2:0), which the server's processor keeps.

    The cap holds for every accepted image once ``max_image_tokens >= 200``: the processor's ``max(28, ...)`` clamp
    can only exceed it for a short side below 28 pixels after scaling, i.e. an area of at most 28 x 5600 pixels
    (aspect ratio 200), 200 tokens; an image that would exceed a smaller cap is refused.

    Raises:
        ImageRefused: ``image_<reason>`` when the bytes do not decode (reasons of :class:`images.Reject`),
            ``bad_box`` for an empty or non-finite box, ``aspect_ratio_over_200``, ``too_many_image_tokens``.
        ValueError: ``max_image_tokens`` below 16.
    """
    import simplejpeg

    if max_image_tokens < 16:
        raise ValueError(f"max_image_tokens must be at least 16, got {max_image_tokens}")
    if box is None:
        fast = _passthrough(data, max_image_tokens)
        if fast is not None:
            return fast
    max_pixels = max_image_tokens * PIXELS_PER_TOKEN_SIDE ** 2
    px = _jpeg_pixels(data, box, max_pixels)
    if px is None:
        try:
            with Image.open(io.BytesIO(data)) as head:  # the oriented size, for the DCT reduction
                hw, hh = head.size
                if head.format == "JPEG" and head.getexif().get(0x0112, 1) in (5, 6, 7, 8):
                    hw, hh = hh, hw
            need = _decode_floor(hw, hh, box, max_pixels)
        except Exception:  # noqa: BLE001 - decode() below rejects the file with its reason
            need = None
        try:
            dec = decode(data, _DECODE_CFG, flag_uniform=False, min_size=need)
        except ImageRejected as exc:
            raise ImageRefused(f"image_{exc.reason}", exc.detail) from exc
        px = np.asarray(dec.rgb), dec.width, dec.height
    a, full_w, full_h = px  # a: the full size, or a DCT reduction of it
    w, h = full_w, full_h
    if box is not None:
        x1, y1, x2, y2 = _crop_box(box, full_w, full_h)
        sx, sy = a.shape[1] / full_w, a.shape[0] / full_h
        a = a[math.floor(y1 * sy): min(a.shape[0], math.ceil(y2 * sy)),
              math.floor(x1 * sx): min(a.shape[1], math.ceil(x2 * sx))]
        w, h = x2 - x1, y2 - y1
    source_size = (w, h)
    if max(w, h) / min(w, h) > MAX_ASPECT_RATIO:
        raise ImageRefused("aspect_ratio_over_200", f"{w}x{h}")
    upscaled = False
    if min(w, h) < PIXELS_PER_TOKEN_SIDE:
        scale = PIXELS_PER_TOKEN_SIDE / min(w, h)
        w, h = max(PIXELS_PER_TOKEN_SIDE, round(w * scale)), max(PIXELS_PER_TOKEN_SIDE, round(h * scale))
        a = np.asarray(Image.fromarray(np.ascontiguousarray(a)).resize((w, h), Image.Resampling.BICUBIC))
        upscaled = True
    tw, th = qwen_resize_target(w, h, max_pixels)
    if image_tokens(tw, th) > max_image_tokens:
        raise ImageRefused("too_many_image_tokens", f"{w}x{h} needs {image_tokens(tw, th)} > {max_image_tokens}")
    a = np.ascontiguousarray(_resize(a, (tw, th)))
    jpeg = simplejpeg.encode_jpeg(a, quality=jpeg_quality, colorspace="RGB", colorsubsampling="420")
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
    return PreparedImage(url, tw, th, image_tokens(tw, th), source_size, upscaled)


# -------------------------------------------------------------------------------------------------- cache


def cache_key(kind: str, image_sha256: str, box: Sequence[float] | None, model: str, prompt_version: str,
              taxonomy_version: str, extra: Any = None) -> str:
    """The cache key of one request: sha256 of the JSON of (kind, image sha256, box, model, prompt version,
    taxonomy version, extra) where ``extra`` is what else the question depends on (the category; the labels a
    judge verifies)."""
    box_l = None if box is None else [round(float(v), 3) for v in box]
    blob = json.dumps([kind, image_sha256, box_l, model, prompt_version, taxonomy_version, extra],
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """Validated model answers on disk (SQLite in WAL mode; each answer committed when it arrives, so a crash loses
    at most the requests in flight). ``path=None`` keeps them in memory only.

    Tables: ``responses(key, kind, image_sha256, box, model, prompt_version, taxonomy_version, extra, response,
    server_version, created_at)`` and ``failures(key, kind, reason, attempts, at)`` (a log; failures are retried
    by the next run).
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path) if self.path else ":memory:", isolation_level=None,
                                   check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            if self.path:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, kind TEXT, image_sha256 TEXT, box TEXT, "
                "model TEXT, prompt_version TEXT, taxonomy_version TEXT, extra TEXT, response TEXT NOT NULL, "
                "server_version TEXT, created_at TEXT)")
            self._db.execute("CREATE TABLE IF NOT EXISTS failures (key TEXT, kind TEXT, reason TEXT, attempts INTEGER, "
                             "at TEXT)")

    def get(self, key: str) -> tuple[dict, str | None] | None:
        """``(answer, server_version)`` stored for ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT response, server_version FROM responses WHERE key = ?", (key,)).fetchone()
        return (json.loads(row[0]), row[1]) if row else None

    def put(self, key: str, answer: dict, *, kind: str, image_sha256: str, box: Sequence[float] | None, model: str,
            prompt_version: str, taxonomy_version: str, extra: Any, server_version: str | None) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (key, kind, image_sha256, json.dumps(list(box) if box is not None else None), model, prompt_version,
                 taxonomy_version, json.dumps(extra, sort_keys=True, ensure_ascii=False),
                 json.dumps(answer, sort_keys=True, ensure_ascii=False), server_version,
                 datetime.now(timezone.utc).isoformat()))

    def log_failure(self, key: str, kind: str, reason: str, attempts: int) -> None:
        with self._lock:
            self._db.execute("INSERT INTO failures VALUES (?,?,?,?,?)",
                             (key, kind, reason, attempts, datetime.now(timezone.utc).isoformat()))

    def count(self, kind: str | None = None) -> int:
        with self._lock:
            q = "SELECT COUNT(*) FROM responses" + (" WHERE kind = ?" if kind else "")
            return self._db.execute(q, (kind,) if kind else ()).fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


# ----------------------------------------------------------------------------------------------- requests


@dataclass
class Outcome:
    """One question's result: ``value`` (a schema-valid answer) or ``reason`` (why it failed after ``requests``
    tries). ``cached``: answered from the cache (no request)."""

    value: dict | None
    reason: str | None
    requests: int
    server_version: str | None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters sent with every request (stored with every label)."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = 0

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "seed": self.seed}


def _http_client(openai: Any) -> Any:
    """The openai client's aiohttp transport (``openai[aiohttp]``, the SDK's choice "for improved concurrency
    performance"), else its default httpx transport."""
    try:
        return openai.DefaultAioHttpClient()
    except (AttributeError, RuntimeError, ImportError):
        return openai.DefaultAsyncHttpxClient()


def _timeout_reason(exc: BaseException) -> str:
    """``timeout``, or ``connection_error`` when the "timeout" is a dropped connection: the SDK's aiohttp transport
    maps every aiohttp ``ClientConnectionError`` (a server closing the connection included) to a connect timeout,
    so the cause chain is what tells them apart."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(x, TimeoutError) for x in seen[1:]):
        return "timeout"
    if any(isinstance(x, ConnectionError) or type(x).__name__ in ("ServerDisconnectedError", "ClientOSError",
                                                                  "ClientConnectorError", "RemoteProtocolError")
           for x in seen[1:]):
        return "connection_error"
    return "timeout"


def _root_url(endpoint: str) -> str:
    e = endpoint.rstrip("/")
    return e[:-3] if e.endswith("/v1") else e


class _Client:
    """An OpenAI-compatible endpoint: schema-constrained chat completions with validation, retries and backoff.

    Lives inside one event loop (one ``annotate_images`` call)."""

    def __init__(self, endpoint: str, model: str, api_key: str, *, timeout_s: float, max_retries: int,
                 backoff_s: float, max_backoff_s: float, sampling: Sampling, extra_body: dict | None,
                 semaphore: asyncio.Semaphore, connections: int, rng: random.Random):
        import openai
        from openai.types.chat import ChatCompletion

        self.endpoint, self.model = endpoint.rstrip("/"), model
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.sampling, self.extra_body = sampling, dict(extra_body or {})
        self.sem, self.rng = semaphore, rng
        self._openai, self._completion = openai, ChatCompletion
        self.http = _http_client(openai)
        self.client = openai.AsyncOpenAI(base_url=self.endpoint, api_key=api_key, max_retries=0,
                                         timeout=timeout_s, http_client=self.http)
        self.server_version: str | None = None
        self._ready: asyncio.Lock = asyncio.Lock()
        self._checked = False
        self._validators: dict[str, Any] = {}

    async def close(self) -> None:
        await self.client.close()

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with "equal jitter": half of ``min(max, base * 2^attempt)`` plus a random half."""
        d = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
        return d / 2 + self.rng.random() * d / 2

    async def ensure_ready(self) -> None:
        """Once per run, before the first request: the server's version (``GET /version``, vLLM; None elsewhere)
        and that it serves the model (``GET /v1/models``; skipped when the endpoint has no such route).

        Raises:
            VlmEndpointError: unreachable after every retry, or the model is not among those served.
        """
        async with self._ready:
            if self._checked:
                return
            last = ""
            for attempt in range(self.max_retries + 1):
                try:
                    models = await self.client.models.list()
                    served = [m.id for m in models.data]
                    if self.model not in served:
                        raise VlmEndpointError(f"{self.endpoint} does not serve model {self.model!r}; it serves "
                                               f"{served}")
                    break
                except self._openai.NotFoundError:
                    break  # an OpenAI-compatible server without the models route
                except (self._openai.APIConnectionError, self._openai.InternalServerError,
                        self._openai.RateLimitError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    if attempt < self.max_retries:
                        await asyncio.sleep(self._backoff(attempt))
                except self._openai.APIStatusError as exc:
                    raise VlmEndpointError(f"{self.endpoint}: GET /models answered {exc.status_code}: {exc}") from exc
            else:
                raise VlmEndpointError(f"{self.endpoint} unreachable after {self.max_retries + 1} tries: {last}")
            try:
                r = await self.http.get(_root_url(self.endpoint) + "/version", timeout=min(10.0, self.timeout_s))
                if r.status_code == 200:
                    self.server_version = str(r.json().get("version"))
            except Exception as exc:  # optional route; any failure just means "unknown"
                log.debug("no /version from %s: %s", self.endpoint, exc)
            self._checked = True

    def _validator(self, schema: dict):
        """A ``jsonschema`` validator per distinct schema (a judge's schema depends on the labels judged): keyed by
        the title and every property's enum, the only parts our schemas vary in. The first schema of a title is
        checked against the draft 2020-12 metaschema."""
        key = (schema["title"], tuple((k, tuple(p.get("enum", ()))) for k, p in schema["properties"].items()))
        v = self._validators.get(key)
        if v is None:
            import jsonschema

            if not any(k[0] == schema["title"] for k in self._validators):
                jsonschema.Draft202012Validator.check_schema(schema)
            v = self._validators[key] = jsonschema.Draft202012Validator(schema)
        return v

    async def ask(self, messages: list[dict], schema: dict, name: str) -> Outcome:
        """Send one schema-constrained question, retrying per the policy; never raises for a bad response.

        Reasons (the last try's): ``timeout``, ``connection_error``, ``http_<status>``, ``finish_reason_<r>``,
        ``invalid_json``, ``schema_invalid``, ``empty_response``, ``bad_response``. HTTP 4xx other than 408, 409 and
        429 is not retried (the same request would be refused again).
        """
        await self.ensure_ready()
        oa = self._openai
        validator = self._validator(schema)
        body: dict[str, Any] = {
            "model": self.model, "messages": messages,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": name, "schema": schema, "strict": True}},
            "temperature": self.sampling.temperature, "top_p": self.sampling.top_p,
            "max_tokens": self.sampling.max_tokens,
        }
        if self.sampling.seed is not None:
            body["seed"] = self.sampling.seed
        body.update(self.extra_body)
        reason = "not_sent"
        for attempt in range(self.max_retries + 1):
            retry = True
            try:
                async with self.sem:
                    # The same POST /chat/completions body that `chat.completions.create(**body)` sends, through the
                    # client's documented raw-request method: `create` deep-transforms every parameter (the JSON
                    # schema and the base64 image included), which measured 1.5-1.9x slower (BENCHMARKS.md). Auth,
                    # timeouts, error mapping (APIStatusError...) and parsing into ChatCompletion are the client's.
                    resp = await self.client.post("/chat/completions", cast_to=self._completion, body=body)
            except oa.APITimeoutError as exc:
                reason = _timeout_reason(exc)
            except oa.APIConnectionError:
                reason = "connection_error"
            except oa.APIStatusError as exc:
                reason = f"http_{exc.status_code}"
                retry = exc.status_code >= 500 or exc.status_code in (408, 409, 429)
            except (oa.APIError, ValueError, TypeError, KeyError) as exc:  # an unparseable 200 body
                reason = "bad_response"
                log.debug("bad response body: %r", exc)
            else:
                reason, value = self._check(resp, validator)
                if value is not None:
                    return Outcome(value, None, attempt + 1, self.server_version)
            if not retry:
                return Outcome(None, reason, attempt + 1, self.server_version)
            if attempt < self.max_retries:
                await asyncio.sleep(self._backoff(attempt))
        return Outcome(None, reason, self.max_retries + 1, self.server_version)

    @staticmethod
    def _check(resp: Any, validator: Any) -> tuple[str | None, dict | None]:
        choices = getattr(resp, "choices", None)
        if not choices:
            return "empty_response", None
        choice = choices[0]
        if choice.finish_reason != "stop":
            return f"finish_reason_{choice.finish_reason}", None
        content = choice.message.content if choice.message else None
        if not content:
            return "empty_response", None
        try:
            value = json.loads(content)
        except json.JSONDecodeError:
            return "invalid_json", None
        if not isinstance(value, dict) or next(validator.iter_errors(value), None) is not None:
            return "schema_invalid", None
        return None, value


# ------------------------------------------------------------------------------------------------ prompts


SYSTEM_PROMPT = ("You label fashion product images for a retrieval benchmark. Look only at the image. Answer with "
                 "JSON that matches the given schema and nothing else.")


def _values_line(tax: Taxonomy, category: str, attr: str, exclude: str | None = None) -> str:
    vals = [v for v in tax.allowed(category, attr) if v != exclude]
    desc = tax.descriptions.get(attr)
    return f"- {attr}{f' ({desc})' if desc else ''}: {', '.join(vals)}"


def category_prompt(tax: Taxonomy, boxed: bool) -> str:
    lines = [f"- {c.name}: {', '.join(c.synonyms[:8])}" for c in tax.categories.values()]
    subject = "the item in this crop" if boxed else "the main fashion item in this image"
    return (f"Which category is {subject}? Choose one of these categories (examples after each), or "
            f"\"{NONE_CATEGORY}\" if the image shows no fashion item.\n" + "\n".join(lines))


def category_schema(tax: Taxonomy) -> dict[str, Any]:
    """Schema of the category question: ``{"category": <one of the categories or "none">}``."""
    return {"title": f"lookbench_category_v{tax.version}", "type": "object",
            "properties": {"category": {"type": "string", "enum": [*tax.categories, NONE_CATEGORY]}},
            "required": ["category"], "additionalProperties": False}


def attributes_prompt(tax: Taxonomy, category: str, boxed: bool) -> str:
    lines = [_values_line(tax, category, a) for a in tax.categories[category].attributes]
    subject = f"the {category} in this crop" if boxed else f"the {category} in this image"
    return (f"Label {subject}. For each attribute choose exactly one of the listed values, as it looks in the "
            f"image; answer \"{tax.not_visible}\" when the attribute cannot be seen or does not apply.\n"
            + "\n".join(lines))


def reannotate_prompt(tax: Taxonomy, category: str, rejected: dict[str, str], boxed: bool) -> str:
    lines = [_values_line(tax, category, a, exclude=v) for a, v in rejected.items()]
    wrong = "; ".join(f"{a}: {v}" for a, v in rejected.items())
    subject = f"the {category} in this crop" if boxed else f"the {category} in this image"
    return (f"A reviewer found these labels of {subject} wrong: {wrong}. Look again and choose the correct value "
            f"for each attribute, or \"{tax.not_visible}\" if it cannot be seen.\n" + "\n".join(lines))


def restricted_schema(tax: Taxonomy, category: str, rejected: dict[str, str]) -> dict[str, Any]:
    """Schema of a re-annotation: only the rejected attributes, each without its rejected value."""
    props = {a: {"type": "string", "enum": [*(x for x in tax.allowed(category, a) if x != v), tax.not_visible]}
             for a, v in rejected.items()}
    return {"title": f"lookbench_{category}_reannotate_v{tax.version}", "type": "object", "properties": props,
            "required": list(rejected), "additionalProperties": False}


def judge_prompt(tax: Taxonomy, category: str, labels: dict[str, str], boxed: bool) -> str:
    lines = []
    for a, v in labels.items():
        desc = tax.descriptions.get(a)
        lines.append(f"- {a}{f' ({desc})' if desc else ''}: {v}")
    subject = f"the {category} in this crop" if boxed else f"the {category} in this image"
    return (f"You check another annotator's labels of {subject}. For each attribute answer \"{ACCEPT}\" if the "
            f"value is correct for the {category} as it looks in the image, \"{REJECT}\" if it is wrong or cannot "
            f"be seen.\n" + "\n".join(lines))


def judge_schema(tax: Taxonomy, category: str, attributes: Iterable[str]) -> dict[str, Any]:
    """Schema of a judge's answer: ``{attribute: "accept" | "reject"}`` for each attribute judged."""
    attrs = list(attributes)
    return {"title": f"lookbench_{category}_judge_v{tax.version}", "type": "object",
            "properties": {a: {"type": "string", "enum": [ACCEPT, REJECT]} for a in attrs},
            "required": attrs, "additionalProperties": False}


def _messages(image_url: str, text: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                         {"type": "text", "text": text}]}]


def _schema_name(schema: dict) -> str:
    """A response_format name (``^[a-zA-Z0-9_-]{1,64}$``) from the schema title."""
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in schema["title"])[:64]


# ------------------------------------------------------------------------------------------------- labels


@dataclass(frozen=True)
class ImageItem:
    """One item to label from one image.

    ``source``: the image bytes, a file path, or a callable returning the bytes (called only when a request is
    needed — a fully cached item is never read). ``sha256``: of those bytes (computed when not given).
    ``box``: ``[x1, y1, x2, y2]`` pixels on the EXIF-oriented image, or None for the whole image. ``category``:
    the category when already known (e.g. from the catalogue text); None asks the model.
    """

    item_id: str
    source: bytes | str | Path | Callable[[], bytes]
    sha256: str | None = None
    box: tuple[float, float, float, float] | None = None
    category: str | None = None

    def read(self) -> bytes:
        if isinstance(self.source, bytes):
            return self.source
        if callable(self.source):
            return self.source()
        return Path(self.source).read_bytes()


@dataclass
class VlmLabel:
    """One item's labels from the model (and judge).

    ``status``: ``labelled``, ``rejected`` (the item cannot be labelled: ``reason`` is ``no_category_match``,
    ``unknown_category:<c>``, or an image refusal such as ``aspect_ratio_over_200``) or ``failed`` (a question
    failed after every retry: ``reason`` is ``<question>:<code>``, question ``category``, ``attributes``,
    ``judge`` or ``reannotate``). ``attributes``: the labels Fine matching reads (accepted by the judge when there
    is one; "not visible" answers are left out, as absent labels are "not carried"). ``verdicts``: every judged
    label ``(name, value, verdict, round)`` — round 2 is a re-annotated value. ``requests``: requests sent for this
    item by this run (0 when every answer came from the cache).
    """

    item_id: str
    status: str
    reason: str | None
    category: str | None
    attributes: dict[str, str]
    annotator: str
    taxonomy_version: str
    image_sha256: str | None = None
    box: tuple[float, ...] | None = None
    model: str | None = None
    server_version: str | None = None
    prompt_version: str | None = None
    sampling: dict[str, Any] | None = None
    judge_model: str | None = None
    judge_server_version: str | None = None
    judge_prompt_version: str | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    not_visible: list[str] = field(default_factory=list)
    requests: int = 0
    cached: int = 0

    def row(self) -> dict[str, Any]:
        """The row of ``schemas.ANNOTATIONS``."""
        return {
            "item_id": self.item_id, "status": self.status, "reason": self.reason, "category": self.category,
            "attributes": [{"name": k, "value": v} for k, v in sorted(self.attributes.items())],
            "annotator": self.annotator, "taxonomy_version": self.taxonomy_version,
            "image_sha256": self.image_sha256, "box": list(self.box) if self.box is not None else None,
            "model": self.model, "server_version": self.server_version, "prompt_version": self.prompt_version,
            "sampling": json.dumps(self.sampling, sort_keys=True) if self.sampling is not None else None,
            "judge_model": self.judge_model, "judge_server_version": self.judge_server_version,
            "judge_prompt_version": self.judge_prompt_version, "judge_verdicts": self.verdicts,
            "requests": self.requests,
        }


@dataclass
class _Ctx:
    item: ImageItem
    sha: str
    data: bytes | None = None
    prepared: PreparedImage | None = None
    requests: int = 0
    cached: int = 0


class FittedCache:
    """Fitted images (:class:`PreparedImage`) keyed by (image sha256, box, token budget), at most ``max_bytes`` of
    data URLs, the least recently used dropped first. ``hits`` / ``misses`` count look-ups."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes, self.hits, self.misses = max_bytes, 0, 0, 0
        self._items: OrderedDict[tuple, PreparedImage] = OrderedDict()

    def get(self, key: tuple) -> PreparedImage | None:
        p = self._items.get(key)
        if p is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return p

    def put(self, key: tuple, p: PreparedImage) -> None:
        if key in self._items or len(p.data_url) > self.max_bytes:
            return
        self._items[key] = p
        self.bytes += len(p.data_url)
        while self.bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.bytes -= len(old.data_url)

    def __len__(self) -> int:
        return len(self._items)


class VlmJudge:
    """A judge model that accepts or rejects each attribute label against the image.

    Same connection parameters as :class:`VlmAnnotator`; ``api_key=None`` reads nothing and sends ``EMPTY``.
    Used by passing it to :class:`VlmAnnotator` (``judge=``), which runs it inside the same event loop and under
    the same bound on requests in flight.
    """

    def __init__(self, endpoint: str, model: str, api_key: str | None = None, *, timeout_s: float | None = None,
                 max_retries: int | None = None):
        self.endpoint, self.model, self.api_key = endpoint, model, api_key or "EMPTY"
        self.timeout_s, self.max_retries = timeout_s, max_retries

    @property
    def name(self) -> str:
        return f"judge:{self.model}@{JUDGE_PROMPT_VERSION}"


class VlmAnnotator:
    """Category and attribute labels from a vision-language model behind an OpenAI-compatible endpoint.

    Args:
        endpoint: API base URL, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name (``Qwen/Qwen2.5-VL-72B-Instruct`` in production).
        taxonomy: the taxonomy whose JSON schemas constrain the answers.
        api_key: sent as the bearer token (``EMPTY`` when None: a vLLM server without ``--api-key``).
        judge: a :class:`VlmJudge`, or None for no verification.
        on_reject: ``drop`` or ``reannotate`` (ask once more for a rejected attribute, keep the new value only if
            the judge accepts it).
        cache: a :class:`ResponseCache`, a path to its SQLite file, or None for an in-memory cache.
        concurrency: requests in flight at most (annotator and judge together).
        timeout_s: per request, seconds (connect, read and write each).
        max_retries: retries after the first try of each question (so ``max_retries + 1`` requests at most).
        backoff_s, max_backoff_s: exponential backoff ``min(max, base * 2^attempt)``, with equal jitter.
        max_model_len: the server's context length in tokens; ``max_image_tokens`` + the longest prompt (estimated
            at one token per 2 bytes, a safe upper bound for BPE tokenizers) + ``max_tokens`` must fit.
        max_image_tokens: image tokens per request at most (see :func:`prepare_image`).
        fitted_cache_bytes: the most data-URL bytes of fitted images kept in memory (:class:`FittedCache`, least
            recently used first out), so that no image is fitted twice for one token budget.
        temperature, top_p, max_tokens, seed: sampling parameters (stored with every label).
        extra_body: merged into every request body, e.g. ``{"structured_outputs": {"disable_any_whitespace":
            True}}`` for vLLM.

    Raises:
        ValueError: the token budget does not fit ``max_model_len``, or ``on_reject`` is unknown.
    """

    def __init__(self, endpoint: str, model: str, taxonomy: Taxonomy, *, api_key: str | None = None,
                 judge: VlmJudge | None = None, on_reject: str = "drop",
                 cache: ResponseCache | str | Path | None = None, concurrency: int = 16, timeout_s: float = 120.0,
                 max_retries: int = 4, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 max_model_len: int = 8192, max_image_tokens: int = 1280, temperature: float = 0.0,
                 top_p: float = 1.0, max_tokens: int = 512, seed: int | None = 0,
                 extra_body: dict[str, Any] | None = None, retry_seed: int | None = None,
                 fitted_cache_bytes: int = 256 * 2**20):
        if on_reject not in ("drop", "reannotate"):
            raise ValueError(f"on_reject must be 'drop' or 'reannotate', got {on_reject!r}")
        self.endpoint, self.model, self.tax = endpoint, model, taxonomy
        self.api_key = api_key or "EMPTY"
        self.judge, self.on_reject = judge, on_reject
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        self.max_model_len, self.max_image_tokens = max_model_len, max_image_tokens
        self.sampling = Sampling(temperature, top_p, max_tokens, seed)
        self.extra_body = dict(extra_body or {})
        self._rng = random.Random(retry_seed)
        self._memo: dict[tuple, Any] = {}
        self.fitted = FittedCache(fitted_cache_bytes)
        self._fitting: dict[tuple, asyncio.Future] = {}
        self._check_budget()

    def _memoized(self, key: tuple, make: Callable[[], Any]) -> Any:
        """Prompts and schemas depend only on (question, category, boxed): built once per annotator."""
        v = self._memo.get(key)
        if v is None:
            v = self._memo[key] = make()
        return v

    @property
    def name(self) -> str:
        """The ``annotator`` column: ``vlm:<model>@<prompt version>`` (``+judge:<model>@<version>`` when judged)."""
        base = f"vlm:{self.model}@{PROMPT_VERSION}"
        return f"{base}+{self.judge.name}" if self.judge else base

    def _check_budget(self) -> None:
        longest = max([len(category_prompt(self.tax, True).encode())]
                      + [len(attributes_prompt(self.tax, c, True).encode()) for c in self.tax.categories])
        text_tokens = (len(SYSTEM_PROMPT.encode()) + longest) // 2 + 64  # + chat template tokens
        need = self.max_image_tokens + text_tokens + self.sampling.max_tokens
        if need > self.max_model_len:
            raise ValueError(f"max_image_tokens {self.max_image_tokens} + prompt (<= {text_tokens} tokens) + "
                             f"max_tokens {self.sampling.max_tokens} = {need} > max_model_len {self.max_model_len}")

    # ----------------------------------------------------------------------------------- the sync facade

    def annotate_images(self, items: Sequence[ImageItem],
                        progress: Callable[[int, int], None] | None = None) -> list[VlmLabel]:
        """Label every item (in input order). See :meth:`aannotate_images`.

        Raises:
            VlmEndpointError: the endpoint is unreachable or does not serve the model (only when a request is
                needed: a fully cached run needs no server).
            RuntimeError: called from inside a running event loop (use ``await aannotate_images``).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.aannotate_images(items, progress))
        raise RuntimeError("annotate_images called inside a running event loop; use `await aannotate_images(...)`")

    async def aannotate_images(self, items: Sequence[ImageItem],
                               progress: Callable[[int, int], None] | None = None) -> list[VlmLabel]:
        """Label every item: one ``VlmLabel`` per item, in input order; never raises for a bad response or image.

        At most ``concurrency`` requests are in flight; items are worked on by ``2 * concurrency`` workers so that
        image preparation overlaps the requests.
        """
        sem = asyncio.Semaphore(self.concurrency)
        conns = self.concurrency + 4
        mk = dict(timeout_s=self.timeout_s, max_retries=self.max_retries, backoff_s=self.backoff_s,
                  max_backoff_s=self.max_backoff_s, sampling=self.sampling, extra_body=self.extra_body,
                  semaphore=sem, connections=conns, rng=self._rng)
        self._ann = _Client(self.endpoint, self.model, self.api_key, **mk)
        self._jud = None
        if self.judge is not None:
            jk = {**mk, "timeout_s": self.judge.timeout_s or self.timeout_s,
                  "max_retries": self.max_retries if self.judge.max_retries is None else self.judge.max_retries}
            self._jud = _Client(self.judge.endpoint, self.judge.model, self.judge.api_key, **jk)
        results: list[VlmLabel | None] = [None] * len(items)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(items)):
            queue.put_nowait(i)
        done = 0

        async def worker() -> None:
            nonlocal done
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                results[i] = await self._one(items[i])
                done += 1
                if progress:
                    progress(done, len(items))

        try:
            workers = [asyncio.create_task(worker()) for _ in range(min(len(items), 2 * self.concurrency) or 1)]
            await asyncio.gather(*workers)
        finally:
            await self._ann.close()
            if self._jud is not None:
                await self._jud.close()
        return [r for r in results if r is not None]

    # ------------------------------------------------------------------------------------------ one item

    def _label(self, ctx: _Ctx, status: str, reason: str | None, category: str | None,
               attrs: dict[str, str] | None = None, **kw: Any) -> VlmLabel:
        return VlmLabel(item_id=ctx.item.item_id, status=status, reason=reason, category=category,
                        attributes=attrs or {}, annotator=self.name, taxonomy_version=self.tax.version,
                        image_sha256=ctx.sha, box=tuple(ctx.item.box) if ctx.item.box is not None else None,
                        model=self.model, prompt_version=PROMPT_VERSION, sampling=self.sampling.as_dict(),
                        judge_model=self.judge.model if self.judge else None,
                        judge_prompt_version=JUDGE_PROMPT_VERSION if self.judge else None,
                        requests=ctx.requests, cached=ctx.cached, **kw)

    async def _image(self, ctx: _Ctx) -> PreparedImage:
        """The item's prepared image, made once per (image sha256, box, token budget) for the annotator's lifetime
        (:attr:`fitted`; an item's judge and re-annotation requests, and other items of the same image, reuse the
        fitted bytes): in a worker thread (reading the source, decoding a photo of several megapixels), or inline for
        bytes already in memory below ``INLINE_PREPARE_BYTES`` (a thread hop costs more than preparing a
        thumbnail). Two items of one image in flight at once share one preparation."""
        if ctx.prepared is not None:
            return ctx.prepared
        key = (ctx.sha, None if ctx.item.box is None else tuple(float(v) for v in ctx.item.box),
               self.max_image_tokens)
        hit = self.fitted.get(key)
        if hit is not None:
            ctx.prepared, ctx.data = hit, None
            return hit
        pending = self._fitting.get(key)
        if pending is None:
            data = ctx.data
            if data is None and isinstance(ctx.item.source, bytes):
                data = ctx.item.source
            if data is not None and len(data) < INLINE_PREPARE_BYTES:
                ctx.prepared = prepare_image(data, ctx.item.box, self.max_image_tokens)
                self.fitted.put(key, ctx.prepared)
                ctx.data = None
                return ctx.prepared

            def prep() -> PreparedImage:
                return prepare_image(data if data is not None else ctx.item.read(), ctx.item.box,
                                     self.max_image_tokens)

            pending = self._fitting[key] = asyncio.ensure_future(asyncio.to_thread(prep))
            try:
                ctx.prepared = await pending
                self.fitted.put(key, ctx.prepared)
            finally:
                self._fitting.pop(key, None)
        else:
            ctx.prepared = await pending
        ctx.data = None
        return ctx.prepared

    async def _ask(self, ctx: _Ctx, client: _Client, kind: str, prompt_version: str, extra: Any,
                   text: Callable[[], str], schema: dict) -> Outcome:
        key = cache_key(kind, ctx.sha, ctx.item.box, client.model, prompt_version, self.tax.version, extra)
        hit = self.cache.get(key)
        if hit is not None:
            ctx.cached += 1
            return Outcome(hit[0], None, 0, hit[1], cached=True)
        img = await self._image(ctx)  # raises ImageRefused
        out = await client.ask(_messages(img.data_url, text()), schema, _schema_name(schema))
        ctx.requests += out.requests
        if out.ok:
            self.cache.put(key, out.value, kind=kind, image_sha256=ctx.sha, box=ctx.item.box, model=client.model,
                           prompt_version=prompt_version, taxonomy_version=self.tax.version, extra=extra,
                           server_version=out.server_version)
        else:
            self.cache.log_failure(key, kind, out.reason or "", out.requests)
        return out

    async def _one(self, item: ImageItem) -> VlmLabel:
        ctx = _Ctx(item, item.sha256 or "")
        try:
            if not ctx.sha:
                # bytes in memory are hashed inline (a thread hop costs more than hashing a packshot); a file or
                # a store read goes to a worker thread
                ctx.data = item.source if isinstance(item.source, bytes) else await asyncio.to_thread(item.read)
                ctx.sha = hashlib.sha256(ctx.data).hexdigest()
        except OSError as exc:
            return self._label(ctx, "rejected", f"image_unreadable:{type(exc).__name__}", None)
        try:
            return await self._label_item(ctx)
        except ImageRefused as exc:
            return self._label(ctx, "rejected", exc.reason, item.category)
        except OSError as exc:  # the image source (file, store) failed
            return self._label(ctx, "rejected", f"image_unreadable:{type(exc).__name__}", item.category)

    async def _label_item(self, ctx: _Ctx) -> VlmLabel:
        tax, boxed = self.tax, ctx.item.box is not None
        category = ctx.item.category
        memo = self._memoized
        if category is None:
            out = await self._ask(ctx, self._ann, "category", PROMPT_VERSION, None,
                                  lambda: memo(("cp", boxed), lambda: category_prompt(tax, boxed)),
                                  memo(("cs",), lambda: category_schema(tax)))
            if not out.ok:
                return self._label(ctx, "failed", f"category:{out.reason}", None)
            category = out.value["category"]
            if category == NONE_CATEGORY:
                return self._label(ctx, "rejected", "no_category_match", None, server_version=out.server_version)
        elif category not in tax.categories:
            return self._label(ctx, "rejected", f"unknown_category:{category}", category)
        out = await self._ask(ctx, self._ann, "attributes", PROMPT_VERSION, category,
                              lambda: memo(("ap", category, boxed), lambda: attributes_prompt(tax, category, boxed)),
                              memo(("as", category), lambda: tax.json_schema(category)))
        if not out.ok:
            return self._label(ctx, "failed", f"attributes:{out.reason}", category)
        server_version = out.server_version
        answer: dict[str, str] = out.value
        visible = {a: v for a, v in answer.items() if v != tax.not_visible}
        not_visible = sorted(a for a, v in answer.items() if v == tax.not_visible)
        if self._jud is None or not visible:
            return self._label(ctx, "labelled", None, category, visible, server_version=server_version,
                               not_visible=not_visible)
        verdicts, failed, judge_version = await self._judge(ctx, category, visible, 1)
        if failed:
            return self._label(ctx, "failed", f"judge:{failed}", category, server_version=server_version)
        accepted = {a: v for a, v in visible.items() if verdicts[a] == ACCEPT}
        rejected = {a: v for a, v in visible.items() if verdicts[a] == REJECT}
        rows = [{"name": a, "value": v, "verdict": verdicts[a], "round": 1} for a, v in sorted(visible.items())]
        if rejected and self.on_reject == "reannotate":
            out = await self._ask(ctx, self._ann, "reannotate", PROMPT_VERSION, [category, sorted(rejected.items())],
                                  lambda: reannotate_prompt(tax, category, rejected, boxed),
                                  restricted_schema(tax, category, rejected))
            if not out.ok:
                return self._label(ctx, "failed", f"reannotate:{out.reason}", category,
                                   server_version=server_version)
            again = {a: v for a, v in out.value.items() if v != tax.not_visible}
            not_visible += [a for a, v in out.value.items() if v == tax.not_visible]
            if again:
                v2, failed, judge_version = await self._judge(ctx, category, again, 2)
                if failed:
                    return self._label(ctx, "failed", f"judge:{failed}", category, server_version=server_version)
                rows += [{"name": a, "value": v, "verdict": v2[a], "round": 2} for a, v in sorted(again.items())]
                accepted.update({a: v for a, v in again.items() if v2[a] == ACCEPT})
        return self._label(ctx, "labelled", None, category, accepted, server_version=server_version,
                           judge_server_version=judge_version, verdicts=rows, not_visible=sorted(not_visible))

    async def _judge(self, ctx: _Ctx, category: str, labels: dict[str, str],
                     round_: int) -> tuple[dict[str, str], str | None, str | None]:
        assert self._jud is not None
        tax, boxed = self.tax, ctx.item.box is not None
        extra = [category, sorted(labels.items())]
        out = await self._ask(ctx, self._jud, "judge", JUDGE_PROMPT_VERSION, extra,
                              lambda: judge_prompt(tax, category, labels, boxed), judge_schema(tax, category, labels))
        if not out.ok:
            return {}, out.reason, out.server_version
        return out.value, None, out.server_version


# ------------------------------------------------------------------------------------------------ metrics


def acceptance_rates(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The judge's acceptance rates over first-round verdicts (what the annotator got right), from annotation
    rows (``schemas.ANNOTATIONS`` dicts or :meth:`VlmLabel.row`).

    Returns ``{"judged", "accepted", "overall" (None when nothing was judged), "by_attribute": {attr: rate},
    "by_category": {category: rate}, "reannotated", "reannotated_accepted"}``.
    """
    judged = accepted = re_n = re_ok = 0
    by_attr: Counter[str] = Counter()
    by_attr_ok: Counter[str] = Counter()
    by_cat: Counter[str] = Counter()
    by_cat_ok: Counter[str] = Counter()
    for r in rows:
        for v in r.get("judge_verdicts") or []:
            ok = v["verdict"] == ACCEPT
            if v.get("round", 1) != 1:
                re_n += 1
                re_ok += ok
                continue
            judged += 1
            accepted += ok
            by_attr[v["name"]] += 1
            by_attr_ok[v["name"]] += ok
            by_cat[r["category"]] += 1
            by_cat_ok[r["category"]] += ok
    return {
        "judged": judged, "accepted": accepted, "overall": accepted / judged if judged else None,
        "by_attribute": {a: by_attr_ok[a] / n for a, n in sorted(by_attr.items())},
        "by_category": {c: by_cat_ok[c] / n for c, n in sorted(by_cat.items())},
        "reannotated": re_n, "reannotated_accepted": re_ok,
    }


def acceptance_check(rates: dict[str, Any] | None, min_acceptance: float) -> tuple[bool, dict[str, Any]]:
    """Whether a release's labels pass the judge: the overall acceptance rate is at least ``min_acceptance``.

    Passes (with the reason in the details) when no judge ran (``rates`` None) or nothing was judged.
    """
    if rates is None:
        return True, {"judge": "not configured (catalogue-text labels or no judge)", "min_acceptance": min_acceptance}
    if rates["overall"] is None:
        return True, {"judge": "nothing judged", "judged": 0, "min_acceptance": min_acceptance}
    passed = rates["overall"] >= min_acceptance
    return passed, {"acceptance_rate": round(rates["overall"], 4), "min_acceptance": min_acceptance,
                    "judged": rates["judged"], "accepted": rates["accepted"],
                    "by_attribute": {k: round(v, 4) for k, v in rates["by_attribute"].items()},
                    "by_category": {k: round(v, 4) for k, v in rates["by_category"].items()}}


def summarize(labels: Sequence[VlmLabel], started: float | None = None) -> dict[str, Any]:
    """Counts of a labelling run; ``items = labelled + rejected + failed``."""
    c: dict[str, Any] = {"items": len(labels), "labelled": 0, "rejected": 0, "failed": 0}
    reasons: Counter[str] = Counter()
    for lb in labels:
        c[lb.status] += 1
        if lb.reason:
            reasons[f"{lb.status}.{lb.reason}"] += 1
    c["reasons"] = dict(sorted(reasons.items()))
    c["requests"] = sum(lb.requests for lb in labels)
    c["cache_hits"] = sum(lb.cached for lb in labels)
    if started is not None:
        c["seconds"] = round(time.monotonic() - started, 3)
    assert c["items"] == c["labelled"] + c["rejected"] + c["failed"]
    return c
