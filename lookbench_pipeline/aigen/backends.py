"""The backends that fulfil generation requests: ``endpoint`` (an OpenAI-Images-compatible server, with retries;
:class:`EndpointBackend`, :func:`endpoint_for`) and ``job_file`` (requests written for an external generator,
results ingested from a drop folder; :func:`write_jobs`, :func:`ingest_drop`), what a backend made of one request
(:class:`Outcome`) and the reference image sent (:func:`reference_png`). Imports no sibling."""

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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from PIL import Image

from ..config import AigenEndpointConfig, ConfigError
from ..endpoint_errors import classify, describe
from ..images import decode
from ..store import ObjectStore, original_key

log = logging.getLogger(__name__)

REFERENCE_MAX_SIDE = 1024  # pixels: the reference image sent to a generator is at most this long
RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx


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
    def __init__(self, reason: str, detail: str = "", retry_after: float | None = None, down: bool = False):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.retry_after = reason, detail, retry_after
        self.down = down  # nothing answers at the endpoint (connection refused, host name not resolved)


_DOWN_KINDS = ("connection_refused", "name_not_resolved")
"""``endpoint_errors.classify`` kinds that say no server is there at all: once a request has failed with one on
every attempt, the requests left are not sent (:meth:`EndpointBackend.one`)."""


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
        self._openai, self.base_url = openai, base_url
        self._down: str | None = None  # why the endpoint is taken to be down (:meth:`one`), once it is
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
        except o.APIConnectionError as exc:  # a timeout too (APITimeoutError): the cause chain says which
            kind = classify(exc)
            raise _Retryable("timeout" if kind == "timeout" else "connection_error",
                             describe(exc, self.base_url, self.ecfg.timeout_s), down=kind in _DOWN_KINDS) from exc
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
        """Fulfil one request, retrying as configured; never raises for a bad answer.

        Once a request has failed on every attempt because nothing answers at the endpoint (connection refused,
        host name not resolved), the requests after it are not sent: each is ``failed`` at once, reason
        ``connection_error``, 0 attempts, its detail ``not sent: `` and the first one's. A generator that is not
        running would otherwise cost every request its attempts and back-off waits (about 7 s each with the
        defaults), an hour for a thousand requests, to learn the same thing. Failed requests are sent again by the
        next build."""
        if self._down is not None:
            return Outcome("failed", "connection_error", f"not sent: {self._down}", 0)
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
        if last.down:
            self._down = (f"an earlier request found nothing answering after {self.ecfg.max_attempts} tries: "
                          f"{last.detail}")
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


NO_ENDPOINT = ("aigen: no image endpoint configured: set aigen.endpoint.base_url (and model_version), use "
               "aigen.backend: job_file, or aigen.enabled: false; only the demo (a site of kind demo) draws with the "
               "scripted endpoint")
"""Why a configuration that is not the demo's cannot generate without ``aigen.endpoint.base_url``: raised here when
there is something to generate, and by ``lookbench build`` before its crawl."""


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
        raise ConfigError(NO_ENDPOINT)
    with scripted.start() as srv:
        # the same words as before the demo package existed: run logs and counts stay as they were
        desc = (f"no image endpoint configured (aigen.endpoint.base_url): the scripted endpoint of "
                f"lookbench_pipeline.demo.aigen_server on {srv.base_url} draws the pictures (not a generative model)")
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
