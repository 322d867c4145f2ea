"""The annotator: :class:`VlmAnnotator` turns each :class:`ImageItem` into a :class:`VlmLabel` (an annotation
row): it asks for the category unless one is given, then for the category's attributes, and has a
:class:`VlmJudge`, when there is one, accept or reject each label. A bad response or image becomes a failed or
rejected label, never an exception.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..annotate import Label
from ..store import ObjectStore, StoreError, fitted_key
from ..taxonomy import Taxonomy
from .cache import FittedCache, ResponseCache, cache_key
from .client import Outcome, Sampling, _Client
from .fit import FIT_METHOD, ImageRefused, PreparedImage, check_image_tokens, prepare_image
from .fitted import read_fitted
from .prompts import (ACCEPT, JUDGE_PROMPT_VERSION, NONE_CATEGORY, PROMPT_VERSION, REJECT, SYSTEM_PROMPT,
                      _messages, _schema_name, attributes_prompt, category_prompt, category_schema, judge_prompt,
                      judge_schema, reannotate_prompt, restricted_schema)

INLINE_PREPARE_BYTES = 64_000
"""Image bytes already in memory below this size are fitted inline, larger ones in a worker thread
(:meth:`VlmAnnotator._image`)."""


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
class VlmLabel(Label):
    """One item's labels from the model (and judge): the fields of :class:`lookbench_pipeline.annotate.Label`
    (first, in its order), then the model's provenance.

    ``status``: ``labelled``, ``rejected`` (the item cannot be labelled: ``reason`` is ``no_category_match``,
    ``unknown_category:<c>``, or an image refusal such as ``aspect_ratio_over_200``) or ``failed`` (a question
    failed after every retry: ``reason`` is ``<question>:<code>``, question ``category``, ``attributes``,
    ``judge`` or ``reannotate``). ``attributes``: the labels Fine matching reads (accepted by the judge when there
    is one; "not visible" answers are left out, as absent labels are "not carried"). ``verdicts``: every judged
    label ``(name, value, verdict, round)`` — round 2 is a re-annotated value. ``requests``: requests sent for this
    item by this run (0 when every answer came from the cache).
    """

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
        """The row of ``schemas.ANNOTATIONS``: :meth:`Label.row`, then the model's provenance."""
        return {
            **super().row(),
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
        fitted_store: the object store holding inputs already fitted by :func:`.fitted.fit_inputs`: a whole image
            is read from there (:func:`.fitted.read_fitted`, no decode) when present and sound, else fitted from
            the item's source as without it. None: always fit here.
        temperature, top_p, max_tokens, seed: sampling parameters (stored with every label).
        extra_body: merged into every request body, e.g. ``{"structured_outputs": {"disable_any_whitespace":
            True}}`` for vLLM.

    Raises:
        ValueError: the token budget does not fit ``max_model_len`` or is outside 16..16384
            (:data:`.fit.MAX_IMAGE_TOKENS`), or ``on_reject`` is unknown.
    """

    def __init__(self, endpoint: str, model: str, taxonomy: Taxonomy, *, api_key: str | None = None,
                 judge: VlmJudge | None = None, on_reject: str = "drop",
                 cache: ResponseCache | str | Path | None = None, concurrency: int = 16, timeout_s: float = 120.0,
                 max_retries: int = 4, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 max_model_len: int = 8192, max_image_tokens: int = 1280, temperature: float = 0.0,
                 top_p: float = 1.0, max_tokens: int = 512, seed: int | None = 0,
                 extra_body: dict[str, Any] | None = None, retry_seed: int | None = None,
                 fitted_cache_bytes: int = 256 * 2**20, fitted_store: ObjectStore | None = None):
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
        self.fitted_store = fitted_store
        self.fitted_reads = 0  # whole images read from ``fitted_store`` rather than fitted here
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
        check_image_tokens(self.max_image_tokens)
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
        thumbnail). With :attr:`fitted_store`, a whole image already fitted there is read instead of fitted
        (:attr:`fitted_reads` counts them). Two items of one image in flight at once share one preparation."""
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

            def prep() -> tuple[PreparedImage, bool]:
                if self.fitted_store is not None and ctx.item.box is None:
                    try:
                        stored = self.fitted_store.get_bytes(fitted_key(ctx.sha, self.max_image_tokens, FIT_METHOD))
                    except StoreError:
                        stored = None
                    ready = read_fitted(stored, self.max_image_tokens) if stored is not None else None
                    if ready is not None:
                        return ready, True
                return prepare_image(data if data is not None else ctx.item.read(), ctx.item.box,
                                     self.max_image_tokens), False

            pending = self._fitting[key] = asyncio.ensure_future(asyncio.to_thread(prep))
            try:
                ctx.prepared, from_store = await pending
                self.fitted_reads += from_store
                self.fitted.put(key, ctx.prepared)
            finally:
                self._fitting.pop(key, None)
        else:
            ctx.prepared = (await pending)[0]
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
