"""The AI-generated subsets, AIGen-Studio and AIGen-StreetLook: generation requests for chosen real items, the
backends that fulfil them, and the check that a generated image still shows its reference product.

Flow (each step a table of :mod:`lookbench_pipeline.schemas`; docs/AIGEN.md has the picture)::

    annotations + gallery images ──► generation_requests ──► generated_images ──► image intake (images.take_in)
                                         (prompt, seed,       (endpoint or job     ──► generated_checks ──► release
                                          reference)           file; provenance)      (dedup, contamination,
                                                                                       reference check)

* **Requests** (:func:`make_requests`): items with labels (annotations ``labelled``) and an accepted gallery image
  (a crawled product's first accepted image, or a drop image with role ``gallery``), first seen inside the release
  window, optionally of configured categories, are ranked per subset by ``sha1(seed, subset, item)`` and picked
  round-robin over categories (so categories are balanced and adding items changes few picks). A request carries a
  prompt built from the item's category and attribute labels (:func:`build_prompt`), the gallery image as the
  reference, and a seed derived from the configured seed, subset and item. Its id hashes all of these, so the
  same request is the same id in every run.
* **Backends** (:func:`generate`): ``endpoint`` sends each request to an OpenAI-Images-compatible server with the
  ``openai`` client (``images.edit`` with the reference, or ``images.generate``), answer ``b64_json``; HTTP 408,
  409, 429 and 5xx, timeouts, connection errors and malformed answers are retried with exponential backoff (or
  the server's ``Retry-After``) up to ``max_attempts``, then recorded as ``failed`` with the reason. ``job_file``
  writes the requests as JSONL (with the reference images) for an external generator and ingests its results from
  a drop folder: ``<request_id>.<png|jpg|webp>`` plus a sidecar ``<request_id>.json`` with at least ``model`` and
  ``version``; requests without a result stay ``pending``. With no endpoint configured the run is refused, unless
  the configuration is the demo (a ``demo`` site): then the stage passes in the scripted endpoint of
  :mod:`lookbench_pipeline.demo.aigen_server`, which is started on 127.0.0.1 for the run and says so.
* **Provenance**: every result is kept under ``<data_dir>/aigen/results/<request_id>.json`` (file, sha256,
  generator model and version, seed, ``first_seen_at`` = when the pipeline first received it) and, with its image,
  in the object store (``records/aigen/``, :mod:`lookbench_pipeline.records`). A later run reuses it (nothing is
  generated twice; ``first_seen_at`` is kept), restoring it from the store when the local copy is gone (a
  backfill into an empty ``data_dir``).
* **Check** (:func:`check_generated`): accepted by the same image intake, not a duplicate of a real image
  (sha256, or pHash within the dedup threshold confirmed by colour), not in the contamination index, and showing
  its reference product (:mod:`lookbench_pipeline.aigen_check`: attribute agreement and embedding similarity above
  the configured thresholds); otherwise rejected with the reason. ``in = accepted + rejected`` at every step.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image

from . import dedup, schemas
from .aigen_check import (ANNOTATOR_PIXEL_COLOUR, COLOUR_ANCHORS, COLOUR_FAMILY, PixelColourAnnotator,
                          compare_attributes, locate, prepare_reference)
from .config import AigenConfig, AigenEndpointConfig, ConfigError, PipelineConfig
from .images import ImageRef, ImageRejected, decode
from .store import ObjectStore, StoreError, original_key
from .taxonomy import Taxonomy

log = logging.getLogger(__name__)

PROMPT_VERSION = "aigen-prompt/1"
KIND_OF_SUBSET = {"aigen_studio": "studio", "aigen_streetlook": "street"}
REFERENCE_MAX_SIDE = 1024  # pixels: the reference image sent to a generator is at most this long
RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx


# ------------------------------------------------------------------------------------------------ requests


def describe_item(category: str, attrs: dict[str, str], taxonomy: Taxonomy) -> str:
    """A noun phrase for an item from its labels, e.g. ``"a red striped cotton top (sleeve length: short)"``.

    Colour, pattern and material go before the category noun (a solid pattern as "solid black"); every other
    attribute the category uses follows as ``name: value``; values "not visible" are left out."""
    nv = taxonomy.not_visible
    val = {a: v for a, v in attrs.items() if v and v != nv}
    used = taxonomy.categories[category].attributes if category in taxonomy.categories else tuple(sorted(val))
    front = [val[a] for a in ("color", "pattern", "material") if a in val]
    if val.get("pattern") == "solid":
        front.remove("solid")
        front.insert(0, "solid")
    rest = [f"{a.replace('_', ' ')}: {val[a]}" for a in used if a not in ("color", "pattern", "material") and a in val]
    return f"a {' '.join([*front, category.replace('_', ' ')])}" + (f" ({'; '.join(rest)})" if rest else "")


def build_prompt(kind: str, category: str, attrs: dict[str, str], taxonomy: Taxonomy) -> str:
    """The generation prompt of one request (version :data:`PROMPT_VERSION`)."""
    item = describe_item(category, attrs, taxonomy)
    keep = ("The garment must be exactly the one in the reference image: the same colour, pattern, shape and "
            "details.")
    if kind == "studio":
        return (f"Lifestyle studio photograph of {item}, the only product in the picture, fully visible, on a "
                f"plain studio backdrop with soft light; photorealistic. {keep}")
    if kind == "street":
        return (f"Street-style photograph of a person in a city street wearing an outfit that includes {item} "
                f"together with other clothes of different colours; full body, natural daylight; photorealistic. "
                f"{keep}")
    raise ValueError(f"unknown kind {kind!r}; expected studio or street")


@dataclass(frozen=True)
class Reference:
    """A real item that may be generated: its labels and the gallery image that is sent as the reference."""

    item_id: str
    image_sha256: str
    site: str
    category: str
    attributes: dict[str, str]
    first_seen_at: datetime


def reference_candidates(products: pa.Table, drop_items: pa.Table, image_refs: pa.Table, annotations: pa.Table,
                         window: Any | None = None) -> tuple[list[Reference], dict[str, int]]:
    """Items that can be generated, and ``counts``: ``items = eligible + not_labelled + no_accepted_image +
    outside_window``. ``window`` (a :class:`~lookbench_pipeline.release.Window`) keeps items first seen inside it."""
    ann = {r["item_id"]: r for r in annotations.to_pylist() if r["status"] == "labelled"}
    accepted: dict[tuple[str, str], list[dict]] = {}
    for r in image_refs.to_pylist():
        if r["status"] == "accepted":
            accepted.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
    items: list[tuple[str, str, str | None, datetime]] = []  # item id, site, gallery sha256, first seen
    for p in products.to_pylist():
        refs = sorted(accepted.get(("product", p["product_id"]), []), key=lambda r: r["position"])
        items.append((p["product_id"], p["site"], refs[0]["image_sha256"] if refs else None, p["first_seen_at"]))
    for d in drop_items.to_pylist():
        if d["role"] == "gallery":
            refs = accepted.get(("drop", d["drop_image_id"]), [])
            items.append((d["item_id"], f"drop:{d['drop']}", refs[0]["image_sha256"] if refs else None,
                          d["first_seen_at"]))
    counts = {"items": 0, "eligible": 0, "not_labelled": 0, "no_accepted_image": 0, "outside_window": 0}
    out: dict[str, Reference] = {}
    for item_id, site, sha, seen in sorted(items, key=lambda t: (t[0], t[2] or "")):
        if item_id in out:
            continue  # a second gallery picture of an item already taken
        counts["items"] += 1
        a = ann.get(item_id)
        if a is None:
            counts["not_labelled"] += 1
        elif sha is None:
            counts["no_accepted_image"] += 1
        elif window is not None and seen not in window:
            counts["outside_window"] += 1
        else:
            counts["eligible"] += 1
            out[item_id] = Reference(item_id, sha, site, a["category"],
                                     {x["name"]: x["value"] for x in a["attributes"]}, seen)
    return list(out.values()), counts


def _rank(seed: int, subset: str, item_id: str) -> str:
    return hashlib.sha1(f"{seed}\x00{subset}\x00{item_id}".encode()).hexdigest()


def request_seed(seed: int, subset: str, item_id: str) -> int:
    """The generator seed of one request: 31 bits of ``sha1(seed, subset, item)`` (fits every server's int)."""
    return int(_rank(seed, subset, item_id)[:8], 16) & 0x7FFFFFFF


def make_requests(cfg: AigenConfig, references: Sequence[Reference], taxonomy: Taxonomy,
                  size: str) -> tuple[list[dict], dict[str, Any]]:
    """Pick items per configured subset and build their requests (rows of ``generation_requests``)."""
    rows, counts = [], {"eligible": len(references)}
    pool = [r for r in references if not cfg.categories or r.category in cfg.categories]
    counts["category_not_selected"] = len(references) - len(pool)
    for subset in cfg.subsets:
        kind = KIND_OF_SUBSET[subset]
        by_cat: dict[str, list[Reference]] = {}
        for r in sorted(pool, key=lambda r: _rank(cfg.seed, subset, r.item_id)):
            by_cat.setdefault(r.category, []).append(r)
        picked: list[Reference] = []
        while len(picked) < cfg.items_per_subset and any(by_cat.values()):
            for cat in sorted(by_cat):
                if by_cat[cat] and len(picked) < cfg.items_per_subset:
                    picked.append(by_cat[cat].pop(0))
        for r in sorted(picked, key=lambda r: r.item_id):
            seed = request_seed(cfg.seed, subset, r.item_id)
            prompt = build_prompt(kind, r.category, r.attributes, taxonomy)
            rid = hashlib.sha1("\x00".join([kind, r.item_id, r.image_sha256, str(seed), PROMPT_VERSION, prompt,
                                            size]).encode()).hexdigest()[:24]
            rows.append({"request_id": rid, "kind": kind, "subset": subset, "reference_item_id": r.item_id,
                         "reference_image_sha256": r.image_sha256, "reference_site": r.site, "category": r.category,
                         "attributes": [{"name": k, "value": v} for k, v in sorted(r.attributes.items())],
                         "prompt": prompt, "prompt_version": PROMPT_VERSION, "seed": seed, "size": size})
        counts[f"requests.{subset}"] = len(picked)
    counts["requests"] = len(rows)
    return rows, counts


# ------------------------------------------------------------------------------------------------ provenance


class ResultCache:
    """Generated results kept between runs: ``<root>/<request_id>.json`` per result. A record is valid while its
    file exists with the recorded sha256 (a changed or deleted file is a new generation).

    With a ``store``, every result is also kept there with its image (:func:`lookbench_pipeline.records
    .write_generation`, content-addressed, checked on read), and the store's record is the result: a result the
    local folder lacks (a backfill into an empty ``data_dir``), or whose file is gone, is restored from it into
    ``images`` (default ``<root>/../images``); a local result the store lacks is recorded there.

    Raises (``get``): lookbench_pipeline.records.RecordError when a stored record or image is corrupt."""

    def __init__(self, root: Path, store: ObjectStore | None = None, images: Path | None = None):
        self.root = Path(root)
        self.store = store
        self.images = Path(images) if images is not None else self.root.parent / "images"

    def _local(self, request_id: str) -> dict | None:
        p = self.root / f"{request_id}.json"
        if not p.is_file():
            return None
        try:
            rec = json.loads(p.read_text())
            f = Path(rec["path"])
            if f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == rec["sha256"]:
                rec["first_seen_at"] = datetime.fromisoformat(rec["first_seen_at"])
                return rec
        except (ValueError, KeyError, OSError) as exc:
            log.warning("aigen: result record %s unreadable (%s); generating again", p, exc)
        return None

    def get(self, request_id: str) -> dict | None:
        from . import records

        rec = self._local(request_id)
        if self.store is None:
            return rec
        stored = records.read_generation(self.store, request_id)
        if stored is None:
            if rec is not None:  # kept before the store held results
                self._record(request_id, rec, Path(rec["path"]).read_bytes())
            return rec
        srec, image = stored
        if rec is not None and rec["sha256"] == srec["image_sha256"] and rec["first_seen_at"] == srec["first_seen_at"]:
            return rec
        self.images.mkdir(parents=True, exist_ok=True)
        path = self.images / f"{request_id}{srec['ext']}"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(image)
        tmp.replace(path)
        out = {"request_id": request_id, "path": str(path), "sha256": srec["image_sha256"],
               **{k: srec[k] for k in ("backend", "generator_model", "generator_version", "seed", "prompt",
                                       "first_seen_at")}}
        self._put_local(request_id, out)
        log.info("aigen: result of request %s restored from the store's generation record", request_id)
        return out

    def put(self, request_id: str, record: dict) -> None:
        """Keep ``record`` (``path``, ``sha256``, ``backend``, ``generator_model``, ``generator_version``,
        ``seed``, ``prompt``, ``first_seen_at``) locally and, with a store, there."""
        self._put_local(request_id, record)
        if self.store is not None:
            self._record(request_id, record, Path(record["path"]).read_bytes())

    def _record(self, request_id: str, record: dict, image: bytes) -> None:
        from . import records

        records.write_generation(self.store, request_id, {**record, "ext": Path(record["path"]).suffix.lower()},
                                 image)

    def _put_local(self, request_id: str, record: dict) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        rec = {**record, "first_seen_at": record["first_seen_at"].isoformat()}
        tmp = self.root / f".{request_id}.json.tmp"
        tmp.write_text(json.dumps(rec, indent=1, sort_keys=True))
        tmp.replace(self.root / f"{request_id}.json")


@dataclass
class Outcome:
    """What a backend made of one request."""

    status: str  # generated | failed | pending | skipped
    reason: str | None = None
    detail: str | None = None
    attempts: int = 0
    path: str | None = None
    model: str | None = None
    version: str | None = None
    seed: int | None = None
    first_seen_at: datetime | None = None


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ext(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return ".png"
    if data.startswith(b"\xff\xd8"):
        return ".jpg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ".webp"
    return ".bin"  # image intake decides (and rejects what is not an image)


def reference_png(store: ObjectStore, sha256: str) -> bytes:
    """The reference sent to a generator: the stored original, decoded and normalised (EXIF orientation, sRGB,
    alpha on white), at most :data:`REFERENCE_MAX_SIDE` pixels long, as PNG."""
    rgb = decode(store.get_bytes(original_key(sha256))).rgb
    if max(rgb.size) > REFERENCE_MAX_SIDE:
        rgb.thumbnail((REFERENCE_MAX_SIDE, REFERENCE_MAX_SIDE), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    rgb.save(buf, format="PNG")
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ endpoint backend


class _Retryable(Exception):
    def __init__(self, reason: str, detail: str = "", retry_after: float | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.retry_after = reason, detail, retry_after


class _Fatal(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def _retry_after(headers: Any) -> float | None:
    try:
        v = headers.get("retry-after") if headers is not None else None
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None


class EndpointBackend:
    """Sends requests to an OpenAI-Images-compatible endpoint with the ``openai`` client (its own retries off:
    this class retries, so every attempt is counted and every failure has one reason)."""

    def __init__(self, ecfg: AigenEndpointConfig, base_url: str, model: str, version: str, out_dir: Path,
                 api_key: str | None = None, sleep: Callable[[float], None] = time.sleep):
        import openai

        self.ecfg, self.model, self.version, self.out_dir, self.sleep = ecfg, model, version, Path(out_dir), sleep
        self._openai = openai
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=0,
                                    timeout=ecfg.timeout_s)

    def _call(self, req: dict, reference: bytes | None) -> bytes:
        o = self._openai
        kw: dict[str, Any] = {"prompt": req["prompt"], "model": self.model, "n": 1, "size": req["size"]}
        if self.ecfg.response_format:
            kw["response_format"] = self.ecfg.response_format
        extra = dict(self.ecfg.extra_body)
        if self.ecfg.send_seed:
            extra["seed"] = int(req["seed"])
        if extra:
            kw["extra_body"] = extra
        try:
            if self.ecfg.route == "edits":
                resp = self.client.images.edit(image=(f"{req['reference_image_sha256']}.png", reference, "image/png"),
                                               **kw)
            else:
                resp = self.client.images.generate(**kw)
        except o.APIStatusError as exc:
            code = exc.status_code
            msg = str(getattr(exc, "message", exc))[:300]
            if code in RETRY_STATUSES or code >= 500:
                raise _Retryable(f"http_{code}", msg, _retry_after(getattr(exc.response, "headers", None))) from exc
            raise _Fatal(f"http_{code}", msg) from exc
        except o.APITimeoutError as exc:
            raise _Retryable("timeout", str(exc)) from exc
        except o.APIConnectionError as exc:
            raise _Retryable("connection_error", str(exc)) from exc
        except (o.APIResponseValidationError, ValueError, TypeError) as exc:  # a body that is not the API's JSON
            raise _Retryable("malformed_response", f"{type(exc).__name__}: {exc}"[:300]) from exc
        data = getattr(resp, "data", None)
        b64 = getattr(data[0], "b64_json", None) if data else None
        if not isinstance(b64, str) or not b64:
            raise _Retryable("no_image_in_response", f"response without data[0].b64_json: {str(resp)[:200]}")
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _Retryable("malformed_response", f"b64_json is not base64: {exc}") from exc

    def one(self, req: dict, reference: bytes | None) -> Outcome:
        """Fulfil one request, retrying as configured; never raises for a bad answer."""
        last: _Retryable | None = None
        for attempt in range(1, self.ecfg.max_attempts + 1):
            try:
                data = self._call(req, reference)
            except _Fatal as exc:
                return Outcome("failed", exc.reason, exc.detail, attempt)
            except _Retryable as exc:
                last = exc
                if attempt < self.ecfg.max_attempts:
                    wait = exc.retry_after if exc.retry_after is not None else self.ecfg.backoff_s * 2 ** (attempt - 1)
                    self.sleep(min(self.ecfg.backoff_max_s, max(0.0, wait)))
                continue
            received = _now()
            self.out_dir.mkdir(parents=True, exist_ok=True)
            path = self.out_dir / f"{req['request_id']}{_ext(data)}"
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
            return Outcome("generated", attempts=attempt, path=str(path), model=self.model, version=self.version,
                           seed=int(req["seed"]), first_seen_at=received)
        assert last is not None
        return Outcome("failed", last.reason, last.detail, self.ecfg.max_attempts)

    def run(self, requests: Sequence[dict], references: dict[str, bytes]) -> dict[str, Outcome]:
        with ThreadPoolExecutor(max_workers=self.ecfg.concurrency) as pool:
            outs = pool.map(lambda r: self.one(r, references.get(r["reference_image_sha256"])), requests)
            return {r["request_id"]: o for r, o in zip(requests, outs)}


@dataclass(frozen=True)
class ScriptedEndpoint:
    """A stand-in image endpoint the caller passes in (the demo's, :mod:`lookbench_pipeline.demo.aigen_server`):
    ``start()`` serves it for a ``with`` block and gives an object with ``base_url``; ``model`` and ``version``
    are what its pictures are recorded as drawn by."""

    start: Callable[[], AbstractContextManager[Any]]
    model: str
    version: str


@contextmanager
def endpoint_for(ecfg: AigenEndpointConfig, scripted: ScriptedEndpoint | None = None
                 ) -> Iterator[tuple[str, str, str, str | None, str]]:
    """``(base_url, model, version, api_key, description)`` of the configured endpoint; without ``base_url`` the
    ``scripted`` endpoint (the demo's, passed in by the stage) runs on 127.0.0.1 for the duration of the block.

    Raises:
        ConfigError: no ``base_url`` is configured and no scripted endpoint was passed (the configuration is not
            the demo): a missing image endpoint is an error, never silently a stand-in.
    """
    if ecfg.base_url:
        yield (ecfg.base_url, ecfg.model, str(ecfg.model_version), os.environ.get(ecfg.api_key_env),
               f"endpoint {ecfg.base_url} model {ecfg.model}@{ecfg.model_version}")
        return
    if scripted is None:
        raise ConfigError("aigen: no image endpoint configured: set aigen.endpoint.base_url (and model_version), use "
                          "aigen.backend: job_file, or aigen.enabled: false; only the demo (a site of kind demo) "
                          "draws with the scripted endpoint")
    with scripted.start() as srv:
        # the same words as before the demo package existed: run logs and counts stay as they were
        desc = (f"no image endpoint configured (aigen.endpoint.base_url): the scripted endpoint of "
                f"lookbench_pipeline.aigen_server on {srv.base_url} draws the pictures (not a generative model)")
        log.warning("aigen: %s", desc)
        yield srv.base_url, scripted.model, scripted.version, "scripted", desc


# ------------------------------------------------------------------------------------------------ job-file backend


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


def write_jobs(requests: Sequence[dict], job_dir: Path, references: dict[str, bytes]) -> Path | None:
    """Write the requests for an external generator: ``job_dir/requests-<hash>.jsonl`` (one JSON object per line:
    ``request_id, kind, subset, prompt, seed, size, reference_item_id, reference_image`` (a path relative to
    ``job_dir``) and ``result`` (the file names to drop)) and the reference images under ``job_dir/references/``.
    Returns the JSONL path (``None`` when there is nothing to ask)."""
    if not requests:
        return None
    job_dir = Path(job_dir)
    (job_dir / "references").mkdir(parents=True, exist_ok=True)
    lines = []
    for r in sorted(requests, key=lambda r: r["request_id"]):
        ref_rel = f"references/{r['reference_image_sha256']}.png"
        if not (job_dir / ref_rel).is_file() and r["reference_image_sha256"] in references:
            (job_dir / ref_rel).write_bytes(references[r["reference_image_sha256"]])
        lines.append(json.dumps({
            "request_id": r["request_id"], "kind": r["kind"], "subset": r["subset"], "prompt": r["prompt"],
            "seed": int(r["seed"]), "size": r["size"], "reference_item_id": r["reference_item_id"],
            "reference_image": ref_rel,
            "result": {"image": f"{r['request_id']}.png (or .jpg, .webp)", "sidecar": f"{r['request_id']}.json",
                       "sidecar_fields": {"model": "required", "version": "required", "seed": "optional"}},
        }, sort_keys=True))
    name = hashlib.sha1("\n".join(lines).encode()).hexdigest()[:12]
    path = job_dir / f"requests-{name}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def ingest_drop(requests: Sequence[dict], drop_dir: Path, known_ids: set[str],
                now: datetime) -> tuple[dict[str, Outcome], list[str]]:
    """Results for ``requests`` from the drop folder (read in place), and the files there that answer no known
    request (reported, never used). A result needs its sidecar with string ``model`` and ``version``; an image
    without one is ``failed`` ``no_provenance_sidecar``, a sidecar that is not such JSON ``invalid_sidecar``."""
    drop_dir = Path(drop_dir)
    out: dict[str, Outcome] = {}
    files = sorted(p for p in drop_dir.iterdir() if p.is_file()) if drop_dir.is_dir() else []
    unmatched = [p.name for p in files if p.stem not in known_ids and not p.name.startswith(".")]
    by_stem: dict[str, list[Path]] = {}
    for p in files:
        by_stem.setdefault(p.stem, []).append(p)
    for r in requests:
        rid = r["request_id"]
        imgs = [p for p in by_stem.get(rid, []) if p.suffix.lower() in IMAGE_SUFFIXES]
        if not imgs:
            continue
        if len(imgs) > 1:
            out[rid] = Outcome("failed", "ambiguous_result", f"several result files: {[p.name for p in imgs]}")
            continue
        side = drop_dir / f"{rid}.json"
        if not side.is_file():
            out[rid] = Outcome("failed", "no_provenance_sidecar", f"{imgs[0].name} has no {side.name}")
            continue
        try:
            meta = json.loads(side.read_text(encoding="utf-8"))
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
            model, version = meta.get("model"), meta.get("version")
            if not (isinstance(model, str) and model and isinstance(version, (str, int, float)) and str(version)):
                raise ValueError("needs string fields 'model' and 'version'")
            if meta.get("request_id") not in (None, rid):
                raise ValueError(f"request_id {meta.get('request_id')!r} is not {rid!r}")
            seed = int(meta["seed"]) if meta.get("seed") is not None else int(r["seed"])
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            out[rid] = Outcome("failed", "invalid_sidecar", f"{side.name}: {exc}")
            continue
        out[rid] = Outcome("generated", path=str(imgs[0].resolve()), model=model, version=str(version), seed=seed,
                           first_seen_at=now)
    return out, unmatched


# ------------------------------------------------------------------------------------------------ generate


def generate(cfg: PipelineConfig, requests: pa.Table, store: ObjectStore, window: Any,
             now: datetime | None = None, scripted: ScriptedEndpoint | None = None
             ) -> tuple[list[dict], dict[str, Any]]:
    """Fulfil every request (rows of ``generated_images``, one per request, in request order) with the configured
    backend, reusing results of earlier runs. A request of a window that has ended is not sent (``skipped``,
    ``window_closed``: its image could not be first seen inside the window). ``counts``: ``requests = generated +
    failed + pending + skipped``. ``scripted``: the stand-in endpoint used when no ``base_url`` is configured (the
    demo's; without one that is a ConfigError, :func:`endpoint_for`)."""
    a = cfg.aigen
    now = now or _now()
    data = Path(cfg.data_dir) / "aigen"
    cache = ResultCache(data / "results", store)
    reqs = requests.to_pylist()
    outcomes: dict[str, Outcome] = {}
    todo = []
    for r in reqs:
        rec = cache.get(r["request_id"])
        if rec is not None:
            outcomes[r["request_id"]] = Outcome("generated", path=rec["path"], model=rec["generator_model"],
                                                version=rec["generator_version"], seed=rec["seed"],
                                                first_seen_at=rec["first_seen_at"])
        else:
            todo.append(r)
    counts: dict[str, Any] = {"requests": len(reqs), "from_earlier_runs": len(outcomes), "backend": a.backend}
    if todo and now >= window.end:
        for r in todo:
            outcomes[r["request_id"]] = Outcome("skipped", "window_closed", f"window ended {window.end.isoformat()}")
        todo = []
    refs: dict[str, bytes] = {}
    for sha in sorted({r["reference_image_sha256"] for r in todo}):
        try:
            refs[sha] = reference_png(store, sha)
        except (ImageRejected, StoreError) as exc:  # recorded per request below, never the end of the run
            log.warning("aigen: reference image %s unreadable: %s", sha, exc)
    for r in [r for r in todo if r["reference_image_sha256"] not in refs]:
        outcomes[r["request_id"]] = Outcome("failed", "reference_unreadable", f"{r['reference_image_sha256']}")
    todo = [r for r in todo if r["reference_image_sha256"] in refs]
    if todo and a.backend == "endpoint":
        with endpoint_for(a.endpoint, scripted) as (base_url, model, version, key, desc):
            counts["endpoint"] = desc
            outcomes.update(EndpointBackend(a.endpoint, base_url, model, version, data / "images", key).run(todo, refs))
    elif a.backend == "job_file":
        job_dir = a.job_dir or data / "jobs"
        drop_dir = a.drop_dir or data / "drop"
        got, unmatched = ingest_drop(todo, drop_dir, {r["request_id"] for r in reqs}, now)
        outcomes.update(got)
        waiting = [r for r in todo if r["request_id"] not in got]
        for r in waiting:
            outcomes[r["request_id"]] = Outcome("pending", "awaiting_external_generator",
                                                f"listed in {job_dir}; drop results in {drop_dir}")
        jobs = write_jobs(waiting, job_dir, refs)
        counts.update({"job_file": str(jobs) if jobs else None, "drop_dir": str(drop_dir),
                       "unmatched_files": len(unmatched), "unmatched_examples": unmatched[:10]})
        if unmatched:
            log.warning("aigen: %d files in %s answer no request (e.g. %s)", len(unmatched), drop_dir, unmatched[:3])
    rows = []
    cached = {r["request_id"] for r in reqs} - {r["request_id"] for r in todo}
    for r in reqs:
        o = outcomes[r["request_id"]]
        if o.status == "generated" and r["request_id"] not in cached:
            cache.put(r["request_id"], {"request_id": r["request_id"], "path": o.path, "backend": a.backend,
                                        "sha256": hashlib.sha256(Path(o.path).read_bytes()).hexdigest(),
                                        "generator_model": o.model, "generator_version": o.version,
                                        "seed": o.seed, "prompt": r["prompt"], "first_seen_at": o.first_seen_at})
        rows.append({
            "request_id": r["request_id"], "kind": r["kind"], "subset": r["subset"],
            "reference_item_id": r["reference_item_id"], "reference_image_sha256": r["reference_image_sha256"],
            "status": o.status, "reason": o.reason, "detail": o.detail, "attempts": o.attempts,
            "backend": a.backend, "path": o.path, "generator_model": o.model, "generator_version": o.version,
            "prompt": r["prompt"], "seed": o.seed if o.seed is not None else r["seed"],
            "first_seen_at": o.first_seen_at,
        })
    for k in ("generated", "failed", "pending", "skipped"):
        counts[k] = sum(1 for x in rows if x["status"] == k)
    for x in rows:
        if x["reason"]:
            counts[f"{x['status']}.{x['reason']}"] = counts.get(f"{x['status']}.{x['reason']}", 0) + 1
    counts["attempts"] = sum(x["attempts"] for x in rows)
    assert counts["requests"] == counts["generated"] + counts["failed"] + counts["pending"] + counts["skipped"]
    return rows, counts


def image_refs_of(generated: pa.Table) -> list[ImageRef]:
    """The image-intake references of the generated images (owner type ``generated``, owner id = request id)."""
    return [ImageRef("generated", g["request_id"], 0, g["path"], f"aigen:{g['generator_model']}", g["first_seen_at"])
            for g in generated.to_pylist() if g["status"] == "generated"]


# ------------------------------------------------------------------------------------------------ check


@dataclass
class CheckContext:
    """What :func:`check_generated` needs besides the generated images themselves."""

    annotations: pa.Table
    real_images: pa.Table
    contamination: pa.Table  # rows of the CONTAMINATION table for the generated images (find_contamination)
    store: ObjectStore
    taxonomy: Taxonomy
    detections: dict[str, list[dict]] | None = None  # request id -> detections matched to the reference item
    cache: dict[str, Any] = field(default_factory=dict)
    # builds the image annotator of annotate.endpoint (the stage passes pipeline.vlm_annotator); needed only when
    # aigen.check.annotator chooses the image model
    vlm_annotator: Callable[[], Any] | None = None


def _real_duplicates(gen_images: list[dict], real_images: list[dict], threshold: int, max_color_diff: float,
                     max_foreground_delta_e: float = dedup.MAX_FOREGROUND_DELTA_E) -> dict[str, str]:
    """Generated sha256 -> the real image it duplicates (same bytes, or pHash within ``threshold`` bits and
    confirmed by colour, as :func:`lookbench_pipeline.dedup.cluster` decides)."""
    out: dict[str, str] = {}
    real_by_sha = {r["image_sha256"]: r for r in real_images}
    real = [r for r in real_images if "uniform" not in (r.get("flags") or [])]
    rh = dedup.hex_to_u64([r["phash"] for r in real]) if real else np.zeros(0, np.uint64)
    for g in gen_images:
        if g["image_sha256"] in real_by_sha:
            out[g["image_sha256"]] = g["image_sha256"]
            continue
        if not len(rh) or "uniform" in (g.get("flags") or []):
            continue
        d = dedup.popcount64(rh ^ dedup.hex_to_u64([g["phash"]])[0])
        for j in np.nonzero(d <= threshold)[0][np.argsort(d[d <= threshold], kind="stable")]:
            if dedup.confirmed_by_colour(g, real[j], max_color_diff, max_foreground_delta_e):
                out[g["image_sha256"]] = real[j]["image_sha256"]
                break
    return out


class PixelLabeller:
    """The baseline image annotator of the check: :class:`~lookbench_pipeline.aigen_check.PixelColourAnnotator`
    on the garment's pixels at the located region. Its colours are families (navy is blue, burgundy red…), so the
    reference's colour is compared by family (:data:`~lookbench_pipeline.aigen_check.COLOUR_FAMILY`)."""

    families = True

    def __init__(self, taxonomy: Taxonomy):
        self.name = ANNOTATOR_PIXEL_COLOUR
        self.annotator = PixelColourAnnotator(
            allowed=[c for c in taxonomy.values.get("color", {}) if c in COLOUR_ANCHORS] or None,
            solid_share=0.9 if "solid" in taxonomy.values.get("pattern", {}) else None)

    def label(self, jobs: Sequence[tuple[str, str, Any]]) -> dict[str, tuple[dict[str, str] | None, str | None]]:
        """``{request_id: (labels, None)}`` for jobs ``(request_id, image sha256, Match)``."""
        return {rid: (self.annotator.label(m.pixels), None) for rid, _, m in jobs}


class VlmLabeller:
    """The image model that labels the real items (``annotate.endpoint``, :class:`lookbench_pipeline.vlm
    .VlmAnnotator`, with its judge and cache) asked about the located region of each generated image, category
    included (it is not told the reference's category, so a picture of another garment is caught)."""

    families = False

    def __init__(self, annotator: Any, store: ObjectStore):
        self.annotator = annotator
        self.name = self.annotator.name
        self.store = store

    def label(self, jobs: Sequence[tuple[str, str, Any]]) -> dict[str, tuple[dict[str, str] | None, str | None]]:
        from . import vlm

        items = [vlm.ImageItem(f"aigen:{rid}", (lambda sha=sha: self.store.get_bytes(original_key(sha))), sha256=sha,
                               box=tuple(float(v) for v in m.box)) for rid, sha, m in jobs]
        try:
            labels = self.annotator.annotate_images(items) if items else []
        finally:
            self.annotator.cache.close()
        out: dict[str, tuple[dict[str, str] | None, str | None]] = {}
        for (rid, _, _), lb in zip(jobs, labels):
            if lb.status == "labelled":
                out[rid] = ({"category": lb.category or "", **lb.attributes}, None)
            else:
                out[rid] = (None, f"annotation_{lb.status}:{lb.reason}")
        return out


def labeller_for(cfg: PipelineConfig, taxonomy: Taxonomy, store: ObjectStore,
                 vlm_annotator: Callable[[], Any] | None = None) -> PixelLabeller | VlmLabeller:
    """``aigen.check.annotator``: ``vlm`` (or ``auto`` with ``annotate.endpoint`` set) labels generated images with
    the same image model as the real items (the annotator ``vlm_annotator()`` builds: the caller passes the
    factory, so this module does not reach up into the stages); ``pixel-colour`` (or ``auto`` without one) with
    the baseline.

    Raises:
        ValueError: the image model is chosen and no ``vlm_annotator`` factory was given.
    """
    choice = cfg.aigen.check.annotator
    if choice == "vlm" or (choice == "auto" and cfg.annotate.endpoint):
        if vlm_annotator is None:
            raise ValueError("aigen.check.annotator chose the image model (annotate.endpoint) but no annotator "
                             "factory was passed (CheckContext.vlm_annotator)")
        return VlmLabeller(vlm_annotator(), store)
    return PixelLabeller(taxonomy)


def check_generated(cfg: PipelineConfig, generated: pa.Table, gen_refs: pa.Table, gen_images: pa.Table,
                    ctx: CheckContext) -> tuple[list[dict], dict[str, Any]]:
    """One ``generated_checks`` row per ``generated_images`` row, accepted or rejected with the first failing
    reason in this order: the generation (``generation_failed:<r>`` / ``generation_pending`` /
    ``generation_skipped:<r>``), the image intake (``intake:<r>``), ``duplicate_of_real_image``,
    ``contamination:<source>``, then the reference check (``reference_not_labelled``, ``reference_unreadable``,
    ``annotation_failed:<r>`` / ``annotation_rejected:<r>``; else ``category_disagreement``,
    ``attribute_disagreement:<attrs>``, ``no_attribute_to_compare``, ``similarity_below_threshold``: every failing
    one, joined by ``;``).

    The check runs in two passes: every image is located and its similarity measured, then all are labelled at
    once (an image model answers a batch concurrently).

    Raises:
        EmbedderUnavailable: the configured check embedder cannot be loaded.
    """
    from .embed import load_embedder

    chk = cfg.aigen.check
    ann = {r["item_id"]: r for r in ctx.annotations.to_pylist() if r["status"] == "labelled"}
    ref_rows = {r["owner_id"]: r for r in gen_refs.to_pylist()}
    img_rows = {r["image_sha256"]: r for r in gen_images.to_pylist()}
    leaked: dict[str, str] = {}
    for r in ctx.contamination.to_pylist():
        leaked.setdefault(r["image_sha256"], r["source"])
    dup_real = _real_duplicates(list(img_rows.values()), ctx.real_images.to_pylist(), cfg.dedup.hamming_threshold,
                                cfg.dedup.max_color_diff, cfg.dedup.max_foreground_delta_e)
    clusters = {r["image_sha256"]: r["cluster_id"]
                for r in dedup.cluster(list(img_rows.values()), cfg.dedup.hamming_threshold, **cfg.dedup.match)}
    embedder = None
    rows, jobs = [], []
    for g in generated.to_pylist():
        row: dict[str, Any] = {k: g[k] for k in ("request_id", "kind", "subset", "reference_item_id",
                                                 "reference_image_sha256", "backend", "generator_model",
                                                 "generator_version", "prompt", "seed", "first_seen_at")}
        row["source"] = g["path"]
        reason = None
        ref = ref_rows.get(g["request_id"])
        if g["status"] == "pending":
            reason = "generation_pending"
        elif g["status"] != "generated":
            reason = f"generation_{g['status']}:{g['reason']}"
        elif ref is None or ref["status"] != "accepted":
            reason = f"intake:{ref['reason'] if ref else 'not_taken_in'}"
        else:
            sha = ref["image_sha256"]
            info = img_rows[sha]
            row.update(image_sha256=sha, cluster_id=clusters.get(sha), width=info["width"], height=info["height"])
            if sha in dup_real:
                reason = "duplicate_of_real_image"
            elif sha in leaked:
                reason = f"contamination:{leaked[sha]}"
            elif g["reference_item_id"] not in ann:
                reason = "reference_not_labelled"
            else:
                if embedder is None:
                    embedder = load_embedder(chk.embedder)
                m = _locate(row, g, sha, embedder, ctx)
                if m is None:
                    reason = "reference_unreadable"
                else:
                    jobs.append((g["request_id"], sha, m))
        row["status"] = "rejected" if reason else None
        row["reason"] = reason
        rows.append(row)
    labeller = labeller_for(cfg, ctx.taxonomy, ctx.store, ctx.vlm_annotator) if jobs else None
    labels = labeller.label(jobs) if labeller else {}
    matches = {rid: m for rid, _, m in jobs}
    for row in rows:
        if row["status"] is None:
            got, failed = labels[row["request_id"]]
            row["annotator"] = labeller.name
            row["reason"] = failed or _decide(row, got, ann[row["reference_item_id"]], matches[row["request_id"]],
                                              labeller.families, ctx.taxonomy, chk)
            row["status"] = "rejected" if row["reason"] else "accepted"
    counts: dict[str, Any] = {"in": len(rows), "accepted": 0, "rejected": 0, "embedder": chk.embedder,
                              "annotator": labeller.name if labeller else None, "min_similarity": chk.min_similarity,
                              "min_attribute_agreement": chk.min_attribute_agreement}
    for r in rows:
        counts[r["status"]] += 1
        if r["reason"]:
            counts[f"rejected.{r['reason']}"] = counts.get(f"rejected.{r['reason']}", 0) + 1
    for subset in sorted({r["subset"] for r in rows}):
        counts[f"accepted.{subset}"] = sum(1 for r in rows if r["subset"] == subset and r["status"] == "accepted")
    assert counts["in"] == counts["accepted"] + counts["rejected"]
    return rows, counts


def _locate(row: dict, g: dict, sha: str, embedder: Any, ctx: CheckContext) -> Any:
    """Find the reference garment in the generated image and record the similarity; None when the reference
    picture cannot be read."""
    key = f"ref:{g['reference_image_sha256']}"
    try:
        if key not in ctx.cache:
            ctx.cache[key] = prepare_reference(
                decode(ctx.store.get_bytes(original_key(g["reference_image_sha256"]))).rgb, embedder)
        reference = ctx.cache[key]
    except (ImageRejected, StoreError) as exc:
        log.warning("aigen: reference image %s unreadable: %s", g["reference_image_sha256"], exc)
        return None
    image = decode(ctx.store.get_bytes(original_key(sha))).rgb  # accepted by the intake just before
    dets = (ctx.detections or {}).get(g["request_id"]) or []
    m = locate(reference, image, embedder, [d["box"] for d in dets] or None)
    row.update(similarity=m.similarity, region=[float(v) for v in (m.seed_box or m.box)],
               region_source="detector" if dets else "window_search", embedder=embedder.model_id)
    if dets:  # the detected item: its number in the outfit and its crop (what the release publishes)
        d = dets[m.seed_index]
        row.update({k: d.get(k) for k in ("item_index", "crop_sha256", "crop_width", "crop_height")})
    return m


def _decide(row: dict, got: dict[str, str], ref_ann: dict, m: Any, families: bool, taxonomy: Taxonomy,
            chk: Any) -> str | None:
    ref_attrs = {x["name"]: x["value"] for x in ref_ann["attributes"]}
    cat = taxonomy.categories.get(ref_ann["category"])
    labels = {k: v for k, v in got.items() if k != "category" and (cat is None or k in cat.attributes)}
    if families:  # the pixel annotator names colour families; "multicolour" is not a colour it can check
        ref_attrs = {k: (COLOUR_FAMILY.get(v, v) if k == "color" else v) for k, v in ref_attrs.items()
                     if not (k == "color" and v == "multicolour")}
    row.update(attributes=[{"name": k, "value": v} for k, v in sorted(labels.items())])
    compared, agreed, bad = compare_attributes(labels, ref_attrs, taxonomy.not_visible)
    row.update(attributes_compared=compared, attributes_agreed=agreed)
    fails = []
    if got.get("category") and got["category"] != ref_ann["category"]:
        fails.append("category_disagreement")
    if compared == 0:
        if chk.require_attribute:
            fails.append("no_attribute_to_compare")
    elif agreed / compared < chk.min_attribute_agreement:
        fails.append("attribute_disagreement:" + ",".join(bad))
    if m.similarity < chk.min_similarity:
        fails.append("similarity_below_threshold")
    return ";".join(fails) or None


def detection_inputs(generated: pa.Table, gen_refs: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The street outfits that image intake accepted, shaped for the garment-detection stage, which
    detects every garment of a "shop the look" picture and matches the products the look links: ``(looks,
    image_refs)``, one look ``aigen-<request_id>`` per outfit linking its reference item, and its accepted image as
    an ``image_refs`` row of owner type ``look``. Detection on these gives boxes for
    :func:`regions_from_detections`."""
    refs = {r["owner_id"]: r for r in gen_refs.to_pylist() if r["status"] == "accepted"}
    looks, images = [], []
    for g in generated.to_pylist():
        ref = refs.get(g["request_id"])
        if g["kind"] != "street" or g["status"] != "generated" or ref is None:
            continue
        look_id = f"aigen-{g['request_id']}"
        looks.append({"look_id": look_id, "site": "aigen", "url": f"aigen:{g['request_id']}", "image_url": g["path"],
                      "product_urls": [], "product_ids": [g["reference_item_id"]], "crawled_at": None,
                      "first_seen_at": g["first_seen_at"], "last_seen_at": g["first_seen_at"], "disappeared_at": None})
        images.append({**ref, "owner_type": "look", "owner_id": look_id,
                       "ref_id": hashlib.sha1(f"look\x00{look_id}\x000".encode()).hexdigest()})
    return schemas.from_rows(looks, schemas.LOOKS), schemas.from_rows(images, schemas.IMAGE_REFS)


def regions_from_detections(detections: pa.Table) -> dict[str, list[dict]]:
    """``request_id -> detections`` from the garment-detection table (``schemas.DETECTIONS``) of the looks of
    :func:`detection_inputs`: the boxes matched to the reference item (``status == matched``), best score first.
    A request without one is checked by the window search."""
    out: dict[str, list[dict]] = {}
    for d in sorted(detections.to_pylist(), key=lambda d: -(d.get("score") or 0.0)):
        owner = d.get("owner_id") or ""
        if owner.startswith("aigen-") and d.get("status") == "matched" and d.get("box"):
            out.setdefault(owner.removeprefix("aigen-"), []).append(d)
    return out


def manifest_summary(cfg: PipelineConfig, checks: pa.Table | None = None) -> dict[str, Any]:
    """What a release manifest records of the AI-generated subsets: the configuration that matters for
    reproducing them and, per generator (model@version), how many of its images the checks accepted."""
    a = cfg.aigen
    out: dict[str, Any] = {
        "enabled": a.enabled, "backend": a.backend, "prompt_version": PROMPT_VERSION, "seed": a.seed,
        "subsets": list(a.subsets), "items_per_subset": a.items_per_subset,
        "endpoint": (a.endpoint.base_url or "scripted (lookbench_pipeline.aigen_server on 127.0.0.1)")
        if a.backend == "endpoint" else None,
        "check": {"embedder": a.check.embedder, "min_similarity": a.check.min_similarity,
                  "min_attribute_agreement": a.check.min_attribute_agreement,
                  "require_attribute": a.check.require_attribute,
                  "annotator": ("vlm:" + cfg.annotate.model) if (a.check.annotator == "vlm" or (
                      a.check.annotator == "auto" and cfg.annotate.endpoint)) else ANNOTATOR_PIXEL_COLOUR},
    }
    if checks is not None:
        gens: dict[str, int] = {}
        for c in checks.to_pylist():
            if c["status"] == "accepted":
                k = f"{c['generator_model']}@{c['generator_version']}"
                gens[k] = gens.get(k, 0) + 1
        out["generators"] = dict(sorted(gens.items()))
    return out
