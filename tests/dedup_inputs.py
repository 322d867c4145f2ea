"""Inputs for the dedup tests and benchmarks/dedup_quality.py, made the way they occur in practice: colour variants
of one garment drawn small on a white packshot, and background-removed cut-outs of real photographs (OpenCV's
GrabCut in a centred box, the background made transparent as background-removal tools write it)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def packshot(colour: tuple[int, int, int], side_share: float = 0.25, size: int = 800, seed: int = 0) -> bytes:
    """A JPEG packshot: a T-shirt of ``colour`` (woven texture, a print on the chest, a soft shadow) spanning
    ``side_share`` of the side of a white ``size`` x ``size`` canvas. Same ``seed`` = same garment."""
    rng = np.random.default_rng(seed)
    im = Image.new("RGB", (size, size), (255, 255, 255))
    s = side_share * size
    cx, cy = size / 2, size / 2
    body = [(cx - s * .30, cy - s * .50), (cx + s * .30, cy - s * .50), (cx + s * .50, cy - s * .30),
            (cx + s * .40, cy - s * .15), (cx + s * .28, cy - s * .25), (cx + s * .28, cy + s * .50),
            (cx - s * .28, cy + s * .50), (cx - s * .28, cy - s * .25), (cx - s * .40, cy - s * .15),
            (cx - s * .50, cy - s * .30)]
    shadow = Image.new("L", im.size, 0)
    ImageDraw.Draw(shadow).polygon([(x + s * .03, y + s * .03) for x, y in body], fill=60)
    im.paste((200, 200, 200), mask=shadow.filter(ImageFilter.GaussianBlur(s * .03)))
    mask = Image.new("L", im.size, 0)
    ImageDraw.Draw(mask).polygon(body, fill=255)
    tex = np.clip(np.array(colour, dtype=np.float32)[None, None, :]
                  * (0.85 + 0.15 * rng.random((size, size, 1))), 0, 255).astype(np.uint8)
    im.paste(Image.fromarray(tex), mask=mask)
    d = ImageDraw.Draw(im)
    d.ellipse([cx - s * .1, cy - s * .25, cx + s * .1, cy - s * .05], outline=(250, 250, 250), width=max(2, int(s * .02)))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def reencoded(data: bytes, scale: float = 0.5, quality: int = 60) -> bytes:
    """A resized, re-encoded copy (what a mirror or another shop serves) of the picture as it is shown: decoded
    the way the intake decodes it (EXIF orientation, colour profile, alpha on white, 16-bit scaled)."""
    from lookbench_pipeline.images import decode

    im = decode(data).rgb
    im = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def cutout(data: bytes, box: tuple[float, float, float, float] = (0.2, 0.05, 0.8, 0.95)) -> tuple[bytes, float]:
    """A background-removed cut-out of a photograph: GrabCut initialised with ``box`` (shares of width and
    height), the background made transparent; a PNG on the photograph's canvas. Returns ``(png, foreground
    share)``."""
    import cv2

    rgb = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    h, w = rgb.shape[:2]
    f = max(1, round(max(h, w) / 400))  # GrabCut on a reduced copy: seconds, not minutes, on a large photo
    small = cv2.resize(rgb, (w // f, h // f), interpolation=cv2.INTER_AREA)[..., ::-1].copy()
    sh, sw = small.shape[:2]
    rect = (int(box[0] * sw), int(box[1] * sh), int((box[2] - box[0]) * sw), int((box[3] - box[1]) * sh))
    m = np.zeros((sh, sw), np.uint8)
    cv2.setRNGSeed(0)
    cv2.grabCut(small, m, rect, np.zeros((1, 65)), np.zeros((1, 65)), 3, cv2.GC_INIT_WITH_RECT)
    fg = cv2.resize(((m == cv2.GC_FGD) | (m == cv2.GC_PR_FGD)).astype(np.uint8), (w, h),
                    interpolation=cv2.INTER_NEAREST).astype(bool)
    rgba = np.dstack([rgb, np.where(fg, 255, 0).astype(np.uint8)])
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "PNG")
    return buf.getvalue(), float(fg.mean())


def dotted(shape: str, size: tuple[int, int] = (320, 400)) -> bytes:
    """A grey garment (``trousers`` or ``shirt``, the demo shop's outlines, 280 px wide at (20, 60)) printed with
    black dots on a grid fixed to the canvas, on white: two different garments whose patterns line up wherever they
    overlap (what a renderer with one pattern gives; the shirt lies almost wholly inside the trousers' outline)."""
    w, h = size
    im = Image.new("RGB", size, (255, 255, 255))
    mask = Image.new("L", size, 0)
    d = ImageDraw.Draw(mask)
    pt = lambda x, y: (20 + x * 280, 60 + y * 280)  # noqa: E731
    if shape == "trousers":
        d.polygon([pt(.28, .06), pt(.72, .06), pt(.76, .95), pt(.53, .95), pt(.5, .3), pt(.47, .95), pt(.24, .95)],
                  fill=255)
    else:
        d.polygon([pt(.3, .12), pt(.7, .12), pt(.72, .82), pt(.28, .82)], fill=255)
        d.polygon([pt(.3, .12), pt(.08, .38), pt(.18, .41), pt(.32, .35)], fill=255)
        d.polygon([pt(.7, .12), pt(.92, .38), pt(.82, .41), pt(.68, .35)], fill=255)
        d.ellipse([*pt(.42, .06), *pt(.58, .18)], fill=0)
    pat = Image.new("RGB", size, (128, 128, 132))
    dp = ImageDraw.Draw(pat)
    for y in range(9, h, 18):
        for x in range(9 + (y // 18 % 2) * 9, w, 18):
            dp.ellipse([x - 4, y - 4, x + 4, y + 4], fill=(15, 15, 15))
    im.paste(pat, mask=mask)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=92)
    return buf.getvalue()


def greyscale(data: bytes, quality: int = 90) -> bytes:
    """A greyscale copy stored as a one-channel JPEG (Pillow's ``convert("L")``, ITU-R 601-2 luma) of the picture
    as the intake decodes it: what a shop or a data set that saves grey pictures as greyscale files serves."""
    from lookbench_pipeline.images import decode

    buf = io.BytesIO()
    decode(data).rgb.convert("L").save(buf, "JPEG", quality=quality)
    return buf.getvalue()
