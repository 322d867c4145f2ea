"""Fulfilling the requests (:func:`generate`, with the configured backend of :mod:`.backends`) and the provenance
of every result, kept between runs and in the object store (:class:`ResultCache`)."""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..config import PipelineConfig
from ..images import ImageRejected
from ..store import ObjectStore, StoreError
from .backends import (EndpointBackend, Outcome, ScriptedEndpoint, _now, endpoint_for, ingest_drop, reference_png,
                       write_jobs)

log = logging.getLogger(__name__)


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

    def intact(self, request_id: str) -> bool:
        """Whether the local record of ``request_id`` is readable and its image file has the recorded sha256."""
        return self._local(request_id) is not None

    def get(self, request_id: str) -> dict | None:
        from .. import records

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
        from .. import records

        records.write_generation(self.store, request_id, {**record, "ext": Path(record["path"]).suffix.lower()},
                                 image)

    def _put_local(self, request_id: str, record: dict) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        rec = {**record, "first_seen_at": record["first_seen_at"].isoformat()}
        tmp = self.root / f".{request_id}.json.tmp"
        tmp.write_text(json.dumps(rec, indent=1, sort_keys=True))
        tmp.replace(self.root / f"{request_id}.json")


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
    cache = ResultCache(cfg.layout.aigen_results, store, images=cfg.layout.aigen_images)
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
            outcomes.update(EndpointBackend(a.endpoint, base_url, model, version, cfg.layout.aigen_images, key).run(todo, refs))
    elif a.backend == "job_file":
        job_dir = a.job_dir or cfg.layout.aigen_jobs
        drop_dir = a.drop_dir or cfg.layout.aigen_drop
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
