"""Skipping an asset whose inputs, code and configuration did not change since it was last materialized: the
stored value is reused (byte for byte) instead of being computed again.

``@reuse_unchanged(...)`` goes under ``@observed``. Before the asset's function runs, it takes the fingerprint of
(:mod:`lookbench_pipeline.memo`): the library's and ``assets/``'s code and the installed distributions, the
run's parsed configuration and the site and taxonomy files, the partition, every input value (the upstream
assets' tables and dicts as loaded), the files the stage reads in place (``reads``) and any outside state it
depends on (``depends``: e.g. which embedding models can run here). When the last record of this asset and
partition (``<data_dir>/memo/``) has the same fingerprint, the run that recorded it is the one that last wrote
every output (``<partition>.written.json`` of the IO manager, ``assets/io.py``), each output file still has the
sha256 that run wrote, and ``verify`` finds the stage's side effects in place (a report in the store), the stored
values are returned with that run's metadata, plus ``lookbench/reused_from_run``; the step logs "skipped: …",
which ``lookbench build`` / ``demo`` print on the stage's line. Otherwise the function runs and a new record is
kept, with the parts that changed in the metadata (``lookbench/recomputed_because``).

Only stages whose every input can be named take part (see docs/ARCHITECTURE.md, "Reusing unchanged stages"):
stages that read pages or drop folders in place, or write state other stages read, always run.
``LookbenchConfig.reuse_unchanged: false`` (``lookbench build --force``) computes every stage.
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from dagster import MetadataValue, Output, deserialize_value, serialize_value

from lookbench_pipeline.config import PipelineConfig
from lookbench_pipeline.memo import MemoRecord, MemoStore, code_digest, files_digest, json_digest, value_digest

from .io import read_stored_value, written_by

ASSETS_DIR = Path(__file__).resolve().parent

Reads = Callable[[PipelineConfig], Iterable[Path | str | None]]
Depends = Callable[[PipelineConfig], Any]
Verify = Callable[[PipelineConfig, Any, dict[str, Any], dict[str, dict[str, Any]]], str | None]


def reused_message(run_id: str, computed_at: str, counts: str | None = None) -> str:
    """The log message of a stage skipped because nothing it depends on changed. Its first line is what the
    build's terminal shows of the stage (``logs.compact``, wrapped, never cut): that it was skipped and, when the
    run that computed it recorded them, the counts of that run's summary line (``counts``: its first line, e.g.
    ``detections: images 3, boxes 7 …``), so a rerun still says what the release holds; the second, in the
    Dagster event log, says when the reused result was computed."""
    head = f"skipped: unchanged since run {run_id[:8]}, stored result reused"
    return (head + (f"; {counts.strip()}" if counts and counts.strip() else "") + "\n"
            f"computed at {computed_at}; inputs, code and configuration are as they were then")


class _FirstSummary(logging.Handler):
    """Attached to a computing stage's Dagster log manager (a ``logging.Logger``): keeps the first line of the
    first INFO message the stage itself logs (its ``assets.common.summary``), which a later skipped run shows."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.line: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.line is None and record.levelno == logging.INFO:
            text = str(getattr(record, "dagster_meta", {}).get("orig_message") or record.getMessage()).strip()
            if text:
                self.line = text.splitlines()[0]


def fingerprint_parts(cfg: PipelineConfig, partition: str, inputs: dict[str, Any],
                      uses: dict[str, Callable[[Any], Any]] | None = None) -> dict[str, str]:
    """The named digests of what an asset is computed from, known before it runs (module docstring). ``uses``:
    for an input of which the stage reads only a part, the function giving that part (the evaluation reads the
    release's version and files, not when it was published)."""
    parts = {"code": code_digest(ASSETS_DIR), "config": json_digest(cfg.model_dump(mode="json")),
             "config_files": files_digest([*cfg.sites, cfg.taxonomy]), "partition": json_digest(partition)}
    for name, value in sorted(inputs.items()):
        parts[f"input:{name}"] = value_digest((uses or {}).get(name, lambda v: v)(value))
    return parts


def outside_parts(cfg: PipelineConfig, reads: Reads | None = None, depends: Depends | None = None) -> dict[str, str]:
    """The digests of the files an asset reads in place and of the outside state it depends on. Taken before a
    run to compare and after it to record: a stage that makes one of its own inputs on its first run (the demo
    detector, the demo legacy trees) is recorded with it, so the next run can reuse its result."""
    parts = {}
    if reads is not None:
        parts["reads"] = files_digest(cfg.layout.resolve(p) if p is not None else None for p in reads(cfg))
    if depends is not None:
        parts["depends"] = json_digest(depends(cfg))
    return parts


def _stored(cfg: PipelineConfig, record, outputs: tuple[str, ...], partition: str) -> dict[str, Any] | str:
    """The stored values of ``outputs`` if the recorded run wrote them all and they are unchanged, else why not."""
    values = {}
    for name in outputs:
        w = written_by(cfg.layout.root, name, partition)
        if w is None:
            return f"{name} has no record of the run that wrote it"
        if w.get("run_id") != record.run_id:
            return f"{name} was written by another run since"
        try:
            values[name] = read_stored_value(cfg.layout.root, name, partition, w["sha256"])
        except (OSError, ValueError) as exc:
            return str(exc)
    return values


@dataclass
class _Plan:
    """One call of a decorated asset: its fingerprint's parts, the last record, and either the stored values to
    reuse (``values``) or why the function runs (``why``) and what it produced."""

    context: Any
    cfg: PipelineConfig
    memo: MemoStore
    partition: str
    parts: dict[str, str]
    record: MemoRecord | None = None
    values: dict[str, Any] | None = None
    why: list[str] = field(default_factory=list)
    produced: list[Output] = field(default_factory=list)
    summary: _FirstSummary = field(default_factory=_FirstSummary)

    def listen(self) -> None:
        """Keep the first summary line the stage logs while it computes (:class:`_FirstSummary`)."""
        if isinstance(getattr(self.context, "log", None), logging.Logger):
            self.context.log.addHandler(self.summary)

    def stop_listening(self) -> None:
        if isinstance(getattr(self.context, "log", None), logging.Logger):
            self.context.log.removeHandler(self.summary)


def _run_id(context) -> str | None:
    try:
        return context.run.run_id
    except Exception:  # a direct call without a run
        return None


def _metadata(record) -> dict[str, dict[str, Any]]:
    """The recorded outputs' metadata by output name (empty for one dagster cannot read back)."""
    out = {}
    for name, text in record.extra.get("metadata", {}).items():
        try:
            out[name] = deserialize_value(text)
        except Exception:  # written by another dagster version
            out[name] = {}
    return out


def reuse_unchanged(outputs: tuple[str, ...] | None = None, reads: Reads | None = None,
                    depends: Depends | None = None, verify: Verify | None = None,
                    uses: dict[str, Callable[[Any], Any]] | None = None):
    """Decorate an asset's function (first argument the context, a ``lookbench`` resource argument, every other
    argument an input) to skip it when nothing it depends on changed (module docstring).

    ``outputs``: the asset names the function materializes, in the order it yields them (default: the function's
    name); ``reads(cfg)``: files and folders read in place (relative paths under ``data_dir``); ``depends(cfg)``:
    a JSON-able description of outside state the result depends on; ``verify(cfg, store, values, metadata)``
    (the stored values and the recorded metadata, by output name): None when the stage's side effects are still
    in place, else the reason to compute again; ``uses``: see :func:`fingerprint_parts`."""

    def deco(fn):
        names = outputs or (fn.__name__,)
        sig = inspect.signature(fn)
        context_arg = next(iter(sig.parameters))

        def plan(args, kwargs) -> _Plan:
            bound = sig.bind(*args, **kwargs)
            context, resource = bound.arguments[context_arg], bound.arguments["lookbench"]
            inputs = {k: v for k, v in bound.arguments.items() if k not in (context_arg, "lookbench")}
            cfg = resource.load()
            partition = context.partition_key if context.has_partition_key else "all"
            p = _Plan(context, cfg, MemoStore(cfg.layout.memo), partition,
                      {**fingerprint_parts(cfg, partition, inputs, uses), **outside_parts(cfg, reads, depends)})
            p.record = p.memo.get(fn.__name__, partition)
            if p.record is None:
                p.why = ["never recorded"]
            elif not getattr(resource, "reuse_unchanged", True):
                p.why = ["reuse_unchanged is off (--force)"]
            elif p.record.changed(p.parts):
                p.why = p.record.changed(p.parts)
            else:
                found = _stored(cfg, p.record, names, partition)
                if isinstance(found, dict) and verify is not None:
                    found = verify(cfg, resource.store(), found, _metadata(p.record)) or found
                if isinstance(found, dict):
                    p.values = found
                    run_id = _run_id(context)
                    if run_id is not None:  # this run's IO manager holds the same values now: it is their writer
                        p.memo.put(fn.__name__, partition, p.record.parts, run_id, p.record.extra)
                else:
                    p.why = [found]
            return p

        def reused(p: _Plan) -> list[Output]:
            extra = p.record.extra
            by, at = extra.get("computed_by", p.record.run_id), extra.get("computed_at", p.record.recorded_at)
            p.context.log.info(reused_message(by, at, extra.get("summary")))
            mds = _metadata(p.record)
            return [Output(p.values[name], name if len(names) > 1 else "result",
                           metadata={**mds.get(name, {}), "lookbench/reused_from_run": by,
                                     "lookbench/reused": MetadataValue.text(f"inputs, code and configuration "
                                                                            f"unchanged since {at}")})
                    for name in names]

        def computed(p: _Plan, o: Any) -> Any:
            """An output of the function, with why it was computed."""
            if not isinstance(o, Output):
                return o
            p.produced.append(o)
            return o.with_metadata({**o.metadata, "lookbench/recomputed_because": MetadataValue.json(p.why)})

        def remember(p: _Plan) -> None:
            run_id = _run_id(p.context)
            if run_id is None:  # a direct call without a run: nothing stored to reuse
                return
            md = {}
            for o in p.produced:
                try:
                    md[o.output_name if len(names) > 1 else names[0]] = serialize_value(
                        {k: v for k, v in o.metadata.items() if not k.startswith("lookbench/")})
                except Exception:  # metadata dagster cannot serialise: reused without it
                    pass
            p.memo.put(fn.__name__, p.partition, {**p.parts, **outside_parts(p.cfg, reads, depends)}, run_id, {
                "metadata": md, "computed_by": run_id, "summary": p.summary.line,
                "computed_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen(*args, **kwargs):
                p = plan(args, kwargs)
                if p.values is not None:
                    yield from reused(p)
                    return
                p.listen()
                try:
                    for o in fn(*args, **kwargs):
                        yield computed(p, o)
                finally:
                    p.stop_listening()
                remember(p)
            return gen

        @functools.wraps(fn)
        def one(*args, **kwargs):
            p = plan(args, kwargs)
            if p.values is not None:
                return reused(p)[0]
            p.listen()
            try:
                o = computed(p, fn(*args, **kwargs))
            finally:
                p.stop_listening()
            remember(p)
            return o
        return one

    return deco


__all__ = ["fingerprint_parts", "outside_parts", "reuse_unchanged"]
