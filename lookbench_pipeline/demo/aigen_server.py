"""A scripted image-generation endpoint on 127.0.0.1 that speaks the OpenAI Images API shape.

It is what the tests and the demo talk to when no real generator is configured (``aigen.endpoint.base_url``
unset): the pipeline's client code (``openai`` ``images.edit`` / ``images.generate`` with ``base_url``) runs
unchanged against it. It is **not** a generative model: it draws pictures with Pillow, deterministically from the
request (prompt, seed, reference image), and follows a *plan* that decides, per request and attempt, what it
answers:

* ``good``: the reference garment cut out of its packshot (background estimated from the border), slightly
  re-lit, placed on a drawn scene: a studio backdrop for a lifestyle shot, or a street scene with a figure
  wearing the garment and other, differently coloured clothes for a street outfit;
* ``off_product``: a scene with a different garment (another shape, a far-away colour): the reference check must
  reject it;
* ``recolour``: the reference garment with its hue turned half-way round (achromatic garments tinted blue):
  same shape, wrong colour, which the attribute check must reject;
* ``copy_reference``: the reference image sent back unchanged (dedup must find it a duplicate of a real image);
* ``not_an_image``: a well-formed response whose ``b64_json`` decodes to bytes that are not an image (image
  intake rejects it ``not_an_image``);
* ``http_500`` / ``http_429``: an error status with an OpenAI-style error body;
* ``malformed_json``: status 200 with a body that is not JSON; ``no_b64``: JSON without ``data[0].b64_json``.

Routes: ``POST /v1/images/edits`` (multipart form: ``image`` file, ``prompt``, ``model``, ``size``, ``n``,
``response_format``, ``seed``) and ``POST /v1/images/generations`` (JSON; no reference, so ``good`` draws a
garment of the colour and category the prompt names). Anything else is 404.

Usage::

    with scripted_endpoint() as srv:      # srv.base_url == "http://127.0.0.1:<port>/v1"
        client = openai.OpenAI(base_url=srv.base_url, api_key="unused")
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

MODEL = "lookbench-scripted-painter"
"""The generator model name this endpoint reports (recorded as provenance of every image it draws)."""
VERSION = "1"
"""Its version: bump when the drawing changes, so a release says which pictures it holds."""

BEHAVIOURS = ("good", "off_product", "recolour", "copy_reference", "not_an_image", "http_500", "http_429",
              "malformed_json", "no_b64")

# Categories the scripted painter recognises in a prompt, and where on a figure each one is worn.
_UPPER = ("top", "shirt", "sweater", "outerwear", "dress")
_LOWER = ("trousers", "skirt", "shorts")
_FEET = ("shoes",)
_PALETTE = {"black": (25, 25, 28), "white": (238, 236, 230), "grey": (128, 128, 132), "red": (200, 30, 40),
            "pink": (240, 140, 180), "orange": (240, 130, 30), "yellow": (240, 210, 40), "green": (40, 140, 60),
            "blue": (30, 70, 190), "purple": (120, 50, 160), "brown": (120, 75, 40), "beige": (215, 195, 160)}


@dataclass(frozen=True)
class RequestInfo:
    """What the plan sees of one request: the route, the prompt, the seed (``None`` when not sent), whether a
    reference image came with it, and the 0-based attempt number for this (route, prompt, seed)."""

    route: str
    prompt: str
    seed: int | None
    has_reference: bool
    attempt: int
    kind: str  # "street" when the prompt asks for a street photograph, else "studio"


Plan = Callable[[RequestInfo], str]


def default_plan(info: RequestInfo) -> str:
    """The demo's plan, by ``seed % 12`` (a hash of the prompt when no seed is sent): 0 off-product, 1 recolour,
    2 a 500 on the first attempt then good, 3 a non-JSON body on the first attempt then good, 4 bytes that are
    not an image, 5 always 500, 6 an answer without ``b64_json`` on the first attempt then good, 7..11 good."""
    key = info.seed if info.seed is not None else int(hashlib.sha1(info.prompt.encode()).hexdigest()[:8], 16)
    first = info.attempt == 0
    return {0: "off_product", 1: "recolour", 2: "http_500" if first else "good",
            3: "malformed_json" if first else "good", 4: "not_an_image", 5: "http_500",
            6: "no_b64" if first else "good"}.get(key % 12, "good")


# ----------------------------------------------------------------------------------------------- drawing


def parse_size(size: str | None) -> tuple[int, int]:
    """``"WIDTHxHEIGHT"`` in pixels (``"auto"`` or none: 1024 x 1024). Raises ValueError on anything else."""
    if not size or size == "auto":
        return 1024, 1024
    w, _, h = size.lower().partition("x")
    wi, hi = int(w), int(h)
    if not (16 <= wi <= 4096 and 16 <= hi <= 4096):
        raise ValueError(f"size {size!r} out of range")
    return wi, hi


def garment_cutout(ref: Image.Image, tolerance: int = 10) -> Image.Image:
    """The garment of a packshot as RGBA cropped to its extent: pixels farther than ``tolerance`` levels (max over
    channels) from the median border colour are the garment, and so is everything they enclose."""
    rgb = ref.convert("RGB")
    a = np.asarray(rgb, dtype=np.int16)
    border = np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])
    bg = np.median(border, axis=0)
    from scipy.ndimage import binary_closing, binary_fill_holes

    fg = np.abs(a - bg).max(axis=2) > tolerance
    r = max(1, max(fg.shape) // 25)  # white stripes on a white packshot are garment too: bridge and fill them
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    closed = binary_closing(np.pad(fg, r + 1), structure=xx**2 + yy**2 <= r * r)[r + 1:-r - 1, r + 1:-r - 1]
    mask = Image.fromarray(binary_fill_holes(closed | fg).astype(np.uint8) * 255, "L")
    box = mask.getbbox() or (0, 0, rgb.width, rgb.height)
    out = rgb.convert("RGBA")
    out.putalpha(mask)
    return out.crop(box)


def _hue_turn(g: Image.Image) -> Image.Image:
    """Hue turned by 180 degrees; a garment with little saturation is tinted blue instead (same luminance)."""
    alpha = g.getchannel("A")
    hsv = np.asarray(g.convert("RGB").convert("HSV"), dtype=np.int16)
    if float(np.median(hsv[..., 1][np.asarray(alpha) > 0])) < 50:
        lum = g.convert("L")
        tinted = Image.merge("RGB", (lum.point(lambda v: v // 4), lum.point(lambda v: v // 2 + 20),
                                     lum.point(lambda v: min(255, v + 90))))
    else:
        hsv[..., 0] = (hsv[..., 0] + 128) % 256
        tinted = Image.fromarray(hsv.astype(np.uint8), "HSV").convert("RGB")
    tinted = tinted.convert("RGBA")
    tinted.putalpha(alpha)
    return tinted


def _far_colour(g: Image.Image | None, rng: random.Random) -> tuple[int, int, int]:
    """A palette colour far (in RGB) from every colour the garment shows in quantity: ranked by the distance to
    the garment's nearest tenth of pixels, one of the three farthest."""
    if g is None:
        return rng.choice(list(_PALETTE.values()))
    a = np.asarray(g.convert("RGBA"), dtype=np.float32)
    px = a[..., :3][a[..., 3] > 0]
    if len(px) == 0:
        return rng.choice(list(_PALETTE.values()))
    px = px[:: max(1, len(px) // 2000)]
    ranked = sorted(_PALETTE.values(),
                    key=lambda c: -float(np.percentile(np.linalg.norm(px - np.array(c), axis=1), 10)))
    return rng.choice(ranked[:3])


def _shape(kind: str, size: tuple[int, int], colour: tuple[int, int, int], rng: random.Random) -> Image.Image:
    """A simple garment silhouette of a broad ``kind`` (upper, lower, feet, bag) as RGBA."""
    w, h = size
    im = Image.new("RGBA", size, (0, 0, 0, 0))
    d = ImageDraw.Draw(im)
    j = lambda v, s: int(v * s + rng.uniform(-0.03, 0.03) * s)  # noqa: E731
    if kind == "lower":
        d.polygon([(j(.2, w), 0), (j(.8, w), 0), (j(.85, w), h - 1), (j(.55, w), h - 1), (w // 2, j(.3, h)),
                   (j(.45, w), h - 1), (j(.15, w), h - 1)], fill=(*colour, 255))
    elif kind == "feet":
        d.rounded_rectangle([0, h // 3, w // 2 - 2, h - 1], radius=max(2, h // 5), fill=(*colour, 255))
        d.rounded_rectangle([w // 2 + 2, h // 3, w - 1, h - 1], radius=max(2, h // 5), fill=(*colour, 255))
    elif kind == "bag":
        d.rectangle([0, h // 3, w - 1, h - 1], fill=(*colour, 255))
        d.arc([w // 4, 0, 3 * w // 4, 2 * h // 3], 180, 360, fill=(*colour, 255), width=max(2, w // 12))
    else:  # upper body garment with sleeves
        d.polygon([(j(.3, w), 0), (j(.7, w), 0), (j(.72, w), h - 1), (j(.28, w), h - 1)], fill=(*colour, 255))
        d.polygon([(j(.3, w), 0), (0, j(.6, h)), (j(.12, w), j(.65, h)), (j(.32, w), j(.3, h))], fill=(*colour, 255))
        d.polygon([(j(.7, w), 0), (w - 1, j(.6, h)), (j(.88, w), j(.65, h)), (j(.68, w), j(.3, h))],
                  fill=(*colour, 255))
    return im


def _studio(size: tuple[int, int], rng: random.Random) -> Image.Image:
    w, h = size
    wall = np.array([rng.randint(150, 215) for _ in range(3)], dtype=np.float32)
    floor = wall * rng.uniform(0.55, 0.75)
    t = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    horizon = rng.uniform(0.7, 0.8)
    col = np.where(t < horizon, wall * (1.05 - 0.15 * t), floor)
    arr = np.broadcast_to(col, (h, w, 3)).copy()
    # mottling of the backdrop: noise drawn at 1/8 scale and enlarged (cheap, and soft like a painted canvas)
    noise = np.random.default_rng(rng.randrange(1 << 30)).normal(0, 5, (max(1, h // 8), max(1, w // 8)))
    arr += np.asarray(Image.fromarray(noise.astype(np.float32), "F").resize((w, h), Image.Resampling.BILINEAR))[..., None]
    return Image.fromarray(arr.clip(0, 255).astype(np.uint8), "RGB")


def _street(size: tuple[int, int], rng: random.Random) -> Image.Image:
    w, h = size
    im = Image.new("RGB", size)
    d = ImageDraw.Draw(im)
    pale = rng.randint(150, 215)  # an overcast or pale blue sky over grey pavement
    sky = [pale - rng.randint(0, 25), pale - rng.randint(0, 15), min(255, pale + rng.randint(0, 30))]
    dark = rng.randint(55, 105)
    ground = [dark + rng.randint(-8, 8) for _ in range(3)]
    for y in range(h):
        t = y / max(1, h - 1)
        d.line([(0, y), (w, y)], fill=tuple(int(a * (1 - t) + b * t) for a, b in zip(sky, ground)))
    for _ in range(7):  # buildings, windows, street furniture: stone, concrete and brick tones
        x0, y0 = rng.randint(-w // 8, w), rng.randint(0, h * 2 // 3)
        grey = rng.randint(60, 170)
        d.rectangle([x0, y0, x0 + rng.randint(w // 12, w // 4), y0 + rng.randint(h // 10, h // 3)],
                    fill=tuple(max(0, min(255, grey + rng.randint(-18, 18))) for _ in range(3)))
    return im


def _wear(kind_of: str) -> str:
    return ("lower" if kind_of in _LOWER else "feet" if kind_of in _FEET else "bag" if kind_of == "bag"
            else "upper")


def category_in(prompt: str) -> str | None:
    """The first garment category word of the painter's list in ``prompt`` (``None`` if none)."""
    low = prompt.lower()
    hits = [(low.find(c), c) for c in (*_UPPER, *_LOWER, *_FEET, "bag") if low.find(c) >= 0]
    return min(hits)[1] if hits else None


def _colour_in(prompt: str) -> tuple[int, int, int] | None:
    low = prompt.lower()
    hits = [(low.find(c), c) for c in _PALETTE if low.find(c) >= 0]
    return _PALETTE[min(hits)[1]] if hits else None


def _soft(g: Image.Image) -> Image.Image:
    """The paste mask of a garment with a softened edge (a photograph has no hard cut-out edges)."""
    return g.getchannel("A").filter(ImageFilter.GaussianBlur(0.8))


def _fit(g: Image.Image, box_w: int, box_h: int) -> Image.Image:
    s = min(box_w / g.width, box_h / g.height)
    return g.resize((max(1, int(g.width * s)), max(1, int(g.height * s))), Image.Resampling.LANCZOS)


def paint(kind: str, prompt: str, seed: int, size: tuple[int, int], behaviour: str,
          reference: Image.Image | None) -> Image.Image:
    """Draw one answer (deterministic in its arguments). ``kind`` is ``studio`` or ``street``; ``behaviour`` is
    ``good``, ``off_product`` or ``recolour`` (see the module docstring)."""
    rng = random.Random(f"{seed}\x00{prompt}\x00{behaviour}")
    w, h = size
    category = category_in(prompt) or "top"
    ref = garment_cutout(reference) if reference is not None else None
    if ref is None:  # text-to-image: a garment of the colour and category the prompt names
        ref = _shape(_wear(category), (256, 300), _colour_in(prompt) or (128, 128, 132), rng)
    if behaviour == "recolour":
        garment = _hue_turn(ref)
    elif behaviour == "off_product":
        other = rng.choice([k for k in ("upper", "lower", "bag") if k != _wear(category)])
        garment = _shape(other, (256, 300), _far_colour(ref, rng), rng)
    else:
        garment = ImageEnhance.Brightness(ref).enhance(rng.uniform(0.95, 1.05))  # a little studio re-lighting
    if kind == "street":
        scene = _street(size, rng)
        d = ImageDraw.Draw(scene)
        cx = int(w * rng.uniform(0.4, 0.6))
        skin = (rng.randint(140, 230), rng.randint(100, 180), rng.randint(80, 150))
        d.ellipse([cx - w // 16, int(h * .04), cx + w // 16, int(h * .16)], fill=skin)  # head
        slots = {"upper": (int(h * .17), int(h * .50), int(w * .42)), "lower": (int(h * .48), int(h * .90), int(w * .34)),
                 "feet": (int(h * .88), int(h * .99), int(w * .30)), "bag": (int(h * .40), int(h * .62), int(w * .18))}
        worn = _wear(category) if behaviour != "off_product" else "upper"
        companions = [k for k in ("upper", "lower", "feet") if k != worn]
        avoid = ref
        for k in companions:  # the rest of the outfit, in colours away from the reference garment
            top, bottom, bw = slots[k]
            piece = _shape(k, (bw, bottom - top), _far_colour(avoid, rng), rng)
            scene.paste(piece, (cx - bw // 2, top), _soft(piece))
        top, bottom, bw = slots[worn]
        g = _fit(garment, bw, bottom - top)
        x = min(w - g.width, cx + w // 5) if worn == "bag" else cx - g.width // 2
        scene.paste(g, (x, top), _soft(g))
        return scene
    scene = _studio(size, rng)
    g = _fit(garment, int(w * rng.uniform(0.55, 0.7)), int(h * rng.uniform(0.62, 0.75)))
    x = int((w - g.width) * rng.uniform(0.35, 0.65))
    y = int((h - g.height) * rng.uniform(0.3, 0.6))
    shadow = Image.new("RGBA", g.size, (0, 0, 0, 70))
    shadow.putalpha(g.getchannel("A").point(lambda v: 70 if v else 0))
    scene.paste(shadow, (x + w // 60, y + h // 60), shadow.filter(ImageFilter.GaussianBlur(4)))
    scene.paste(g, (x, y), _soft(g))
    return scene


# ----------------------------------------------------------------------------------------------- the server


@dataclass
class Served:
    """One request the endpoint answered: its route, form fields (no file bytes), the behaviour and status."""

    route: str
    fields: dict[str, str]
    has_reference: bool
    attempt: int
    behaviour: str
    status: int


class _Handler(BaseHTTPRequestHandler):
    server: "ScriptedImageServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, etype: str) -> None:
        self._send(status, json.dumps({"error": {"message": message, "type": etype, "code": None}}).encode())

    def do_POST(self) -> None:
        route = self.path.split("?", 1)[0]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if route not in ("/v1/images/edits", "/v1/images/generations"):
            self._error(404, f"no route {route}", "not_found")
            return
        try:
            fields, reference = self._parse(route, body)
            prompt = fields["prompt"]
            seed = int(fields["seed"]) if fields.get("seed") not in (None, "") else None
            size = parse_size(fields.get("size"))
        except (KeyError, ValueError) as exc:
            self._error(400, f"bad request: {exc}", "invalid_request_error")
            return
        if route.endswith("edits") and reference is None:
            self._error(400, "an edit needs an 'image' file", "invalid_request_error")
            return
        srv = self.server
        with srv.lock:
            key = (route, prompt, seed)
            attempt = srv.attempts.get(key, 0)
            srv.attempts[key] = attempt + 1
        kind = "street" if prompt.lower().lstrip().startswith("street") else "studio"
        info = RequestInfo(route, prompt, seed, reference is not None, attempt, kind)
        behaviour = srv.plan(info)
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"plan returned unknown behaviour {behaviour!r}")
        status = {"http_500": 500, "http_429": 429}.get(behaviour, 200)
        with srv.lock:
            srv.served.append(Served(route, {k: v for k, v in fields.items()}, reference is not None, attempt,
                                     behaviour, status))
        if behaviour == "http_500":
            self._error(500, "scripted server error", "server_error")
        elif behaviour == "http_429":
            self._error(429, "scripted rate limit", "rate_limit_exceeded")
        elif behaviour == "malformed_json":
            self._send(200, b"<html>upstream proxy error</html>", "application/json")
        elif behaviour == "no_b64":
            self._send(200, json.dumps({"created": int(time.time()), "data": [{"url": None}]}).encode())
        else:
            if behaviour == "not_an_image":
                data = b"%PDF-1.4 scripted bytes that are not an image\n" * 4
            elif behaviour == "copy_reference" and reference:
                data = reference
            else:
                ref_img = Image.open(io.BytesIO(reference)).convert("RGB") if reference else None
                img = paint(kind, prompt, seed if seed is not None else 0, size, behaviour, ref_img)
                buf = io.BytesIO()
                img.save(buf, format="PNG", compress_level=1)
                data = buf.getvalue()
            self._send(200, json.dumps({"created": int(time.time()), "data": [
                {"b64_json": base64.b64encode(data).decode("ascii"), "revised_prompt": None}]}).encode())

    def _parse(self, route: str, body: bytes) -> tuple[dict[str, str], bytes | None]:
        ctype = self.headers.get("Content-Type", "")
        if route.endswith("generations") or ctype.startswith("application/json"):
            data = json.loads(body or b"{}")
            return {k: str(v) for k, v in data.items() if v is not None}, None
        msg = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
        fields: dict[str, str] = {}
        reference = None
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True) or b""
            if name in ("image", "image[]"):
                reference = reference or payload
            elif name:
                fields[name] = payload.decode("utf-8")
        return fields, reference


class ScriptedImageServer(ThreadingHTTPServer):
    """The endpoint (see the module docstring); ``base_url`` ends in ``/v1`` as the ``openai`` client expects.
    ``served`` lists every request answered; ``attempts`` counts them per (route, prompt, seed)."""

    daemon_threads = True

    def __init__(self, plan: Plan = default_plan):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.plan = plan
        self.lock = threading.Lock()
        self.attempts: dict[tuple, int] = {}
        self.served: list[Served] = []
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}/v1"


@contextmanager
def scripted_endpoint(plan: Plan = default_plan) -> Iterator[ScriptedImageServer]:
    """Serve the scripted endpoint on 127.0.0.1 (a free port) for the duration of the ``with`` block."""
    from .serve import running

    with running(ScriptedImageServer(plan), "lookbench-scripted-images") as srv:
        yield srv


__all__ = ["BEHAVIOURS", "MODEL", "VERSION", "RequestInfo", "ScriptedImageServer", "Served", "default_plan",
           "garment_cutout", "paint", "parse_size", "scripted_endpoint"]

