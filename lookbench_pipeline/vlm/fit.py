"""Fitting an image to Qwen2.5-VL's pixel budget before it is sent: the processor's resize formula
(:func:`qwen_resize_target`, :func:`image_tokens`), the fast paths (the source bytes as they are, a libjpeg-turbo
decode at a DCT reduction) and :func:`prepare_image`, which returns a :class:`PreparedImage` or raises
:class:`ImageRefused`. Imports no other module of the package.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ..config import ImageConfig
from ..images import ImageRejected, decode

# Qwen2.5-VL's vision encoder: 14 x 14 pixel patches, 2 x 2 patches merged into one token, so one image token
# covers 28 x 28 pixels; images are resized to multiples of 28 with at least 4 tokens (56 x 56 pixels) and an
# aspect ratio of at most 200. Source: `smart_resize` in transformers'
# models/qwen2_vl/image_processing_qwen2_vl.py (used by vLLM for Qwen2.5-VL) and the Qwen2.5-VL model card.
PIXELS_PER_TOKEN_SIDE = 28
MIN_IMAGE_TOKENS = 4
MAX_ASPECT_RATIO = 200.0


_DECODE_CFG = ImageConfig(min_side_px=1)  # sides below 28 px are upscaled here, not rejected


class ImageRefused(Exception):
    """An image that cannot be sent to the model; ``reason`` is a short code (``aspect_ratio_over_200``...)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


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

MAX_IMAGE_TOKENS = SERVER_MAX_PIXELS // PIXELS_PER_TOKEN_SIDE ** 2
"""16,384: the most image tokens the server's processor gives an image (a larger budget buys nothing)."""

_PASSTHROUGH_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}

FIT_METHOD = "fit1"
"""Names what :func:`prepare_image` makes of a whole image (the passthrough rule, the decode, :func:`_resize`, the
JPEG encoder at quality 90, 4:2:0): part of the key of every fitted input kept in the store
(:func:`lookbench_pipeline.store.fitted_key`). Change it whenever the bytes made for the same input change, so that
no input fitted the old way is sent again."""


def check_image_tokens(max_image_tokens: int) -> None:
    """Raises ValueError unless ``max_image_tokens`` is within 16..:data:`MAX_IMAGE_TOKENS` (below 16 no image can
    be fitted; above, the server's processor resizes the image down to its cap anyway)."""
    if not 16 <= max_image_tokens <= MAX_IMAGE_TOKENS:
        raise ValueError(f"max_image_tokens must be within 16..{MAX_IMAGE_TOKENS} (the server's processor resizes "
                         f"anything larger down to {MAX_IMAGE_TOKENS} tokens), got {max_image_tokens}")


def server_size_as_is(im: Image.Image, max_image_tokens: int) -> tuple[int, int] | None:
    """The processor size ``(width, height)`` of an opened (not decoded) image the server can take unchanged within
    ``max_image_tokens``: a single-frame JPEG, PNG or WebP that Pillow opens as RGB or greyscale (a PNG of 16 bits per
    channel is one too, and is sent as it is), no alpha or transparency, no ICC profile, no EXIF rotation, sides of at
    least 28 pixels, an aspect ratio of at most 200, at most the intake's pixel limit, and the same processor size
    under the client's budget as under the server's default ``max_pixels``. None otherwise. The sizes are checked
    before the EXIF orientation, which for a PNG or WebP Pillow reads by decoding the pixels (bounded by then by the
    pixel limit and the budget test); a JPEG's pixels are never decoded here."""
    if im.format not in _PASSTHROUGH_MIME or im.mode not in ("RGB", "L") or getattr(im, "n_frames", 1) != 1 \
            or "icc_profile" in im.info or "transparency" in im.info:
        return None
    w, h = im.size
    if min(w, h) < PIXELS_PER_TOKEN_SIDE or max(w, h) / min(w, h) > MAX_ASPECT_RATIO or w * h > _DECODE_CFG.max_pixels:
        return None
    target = qwen_resize_target(w, h, max_image_tokens * PIXELS_PER_TOKEN_SIDE ** 2)
    if qwen_resize_target(w, h, SERVER_MAX_PIXELS) != target or image_tokens(*target) > max_image_tokens:
        return None
    if im.getexif().get(0x0112, 1) in (2, 3, 4, 5, 6, 7, 8):
        return None
    return target


def _passthrough(data: bytes, max_image_tokens: int) -> PreparedImage | None:
    """The source bytes as they are, when the server can take them unchanged and the token count is already
    known: a single-frame JPEG, PNG or WebP, 8-bit RGB or greyscale, no alpha, no ICC profile, no EXIF rotation,
    that decodes completely, whose sides are at least 28 pixels, and whose processor size (:func:`qwen_resize_target`
    with the server's default ``max_pixels``) is the size the client would have resized it to, within
    ``max_image_tokens``. None otherwise (the caller decodes, converts and resizes it)."""
    try:
        im = Image.open(io.BytesIO(data), formats=tuple(_PASSTHROUGH_MIME))
        target = server_size_as_is(im, max_image_tokens)
        if target is None:
            return None
        w, h = im.size
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
        ValueError: ``max_image_tokens`` outside 16..:data:`MAX_IMAGE_TOKENS`.
    """
    import simplejpeg

    check_image_tokens(max_image_tokens)
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
