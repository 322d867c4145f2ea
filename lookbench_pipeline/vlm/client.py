"""One OpenAI-compatible endpoint: :class:`_Client` sends schema-constrained chat completions, validates each
answer and retries with backoff; :class:`Outcome` is one question's result, :class:`Sampling` the sampling
parameters sent, :class:`VlmEndpointError` an endpoint that cannot serve the run at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from dataclasses import dataclass
from typing import Any

from ..endpoint_errors import classify, describe

log = logging.getLogger(__name__)


class VlmEndpointError(RuntimeError):
    """The endpoint cannot serve this run at all: unreachable after every retry, or the model is not served."""


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
    """``timeout``, or ``connection_error`` when the "timeout" is a failure to connect: the SDK's aiohttp transport
    maps every aiohttp ``ClientConnectionError`` (a refused connection, an unknown host, a server closing the
    connection) to a connect timeout, so the cause chain is what tells them apart (:func:`..endpoint_errors.classify`).
    """
    return "timeout" if classify(exc) == "timeout" else "connection_error"


_FINISH_REASON = re.compile(r"[a-z0-9_]{1,32}")
"""A ``finish_reason`` that goes into a failure reason as is (``finish_reason_<r>``); any other is ``bad_response``."""


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
                    last = describe(exc, self.endpoint, self.timeout_s)
                    if attempt < self.max_retries:
                        await asyncio.sleep(self._backoff(attempt))
                except self._openai.APIStatusError as exc:
                    raise VlmEndpointError(f"{self.endpoint}: GET /models answered {exc.status_code}: {exc}") from exc
            else:
                raise VlmEndpointError(f"endpoint unreachable after {self.max_retries + 1} tries: {last}")
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
            except (oa.APIError, ValueError, TypeError, KeyError, RecursionError) as exc:  # an unparseable 200 body
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
        """The schema-valid answer in a parsed response, else why not; total: a response of any shape (the client
        builds it without validation, so ``choices`` may be a string, ``content`` an object...) and any reply text
        (nested past the recursion limit, an integer past Python's digit limit...) gives a reason, never raises.

        ``bad_response``: the response object is malformed (``choices`` not a list of choices, ``content`` not a
        string, an odd ``finish_reason``); ``invalid_json``: the reply text does not parse; ``schema_invalid``: it
        parses but does not validate.
        """
        choices = getattr(resp, "choices", None)
        if not choices:
            return "empty_response", None
        if not isinstance(choices, list):
            return "bad_response", None
        choice = choices[0]
        finish = getattr(choice, "finish_reason", None)
        if not isinstance(finish, str) or not _FINISH_REASON.fullmatch(finish):
            return "bad_response", None
        if finish != "stop":
            return f"finish_reason_{finish}", None
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None) if message is not None else None
        if content is not None and not isinstance(content, str):
            return "bad_response", None
        if not content:
            return "empty_response", None
        try:
            value = json.loads(content)
        except (ValueError, RecursionError):  # JSONDecodeError, an int over sys.get_int_max_str_digits(), nesting
            return "invalid_json", None
        if not isinstance(value, dict):
            return "schema_invalid", None
        try:
            valid = next(validator.iter_errors(value), None) is None
        except (RecursionError, ValueError, TypeError):  # an error message's repr of a deeply nested value
            valid = False
        return (None, value) if valid else ("schema_invalid", None)
