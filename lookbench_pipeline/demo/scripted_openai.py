"""A scripted OpenAI-compatible server on 127.0.0.1 for tests and benchmarks of the VLM client.

It answers ``POST /v1/chat/completions`` with a JSON object that fits the request's ``response_format`` JSON schema
(chosen deterministically from the image and the prompt, or by a callable), ``GET /v1/models`` and ``GET /version``
(as vLLM does), and injects faults at configured rates:

* ``malformed_json`` — ``finish_reason: stop`` with content that is not JSON;
* ``truncated`` — the JSON cut in the middle, ``finish_reason: length``;
* ``schema_invalid`` — valid JSON with a value outside the schema's enum;
* ``http_500`` — an HTTP 500 error body; ``http_400`` — an HTTP 400 (a request the server refuses: not retried);
* ``slow`` — the right answer after ``slow_s`` seconds (beyond a client's timeout);
* ``drop`` — the connection closed without a response.

HTTP/1.1 with keep-alive on asyncio streams, run in a background thread (``with ScriptedOpenAI() as srv:``) or as a
process (``python -m lookbench_pipeline.demo.scripted_openai --port 0``, which prints its base URL).
Every chat request is logged in ``log`` (schema title, fault, image size) so tests can reconcile counts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import io
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

FAULTS = ("malformed_json", "truncated", "schema_invalid", "http_500", "http_400", "slow", "drop")
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}
FAULT_REASONS = {"malformed_json": "invalid_json", "truncated": "finish_reason_length",
                 "schema_invalid": "schema_invalid", "http_500": "http_500", "http_400": "http_400",
                 "slow": "timeout", "drop": "connection_error"}
"""The failure reason the client (lookbench_pipeline.vlm) records for each fault."""


def _h(*parts: str) -> int:
    return int(hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:12], 16)


def default_answer(schema: dict, body: dict, reject_rate: float = 0.0) -> dict:
    """A schema-valid answer: per property an enum value picked by a hash of the image and the prompt (never the
    taxonomy's "not visible", the last value, when there is another); a judge's ``accept``/``reject`` enum is
    ``reject`` for a ``reject_rate`` share of (image, prompt, attribute)."""
    image, text = _image_and_text(body)
    out = {}
    for name, prop in schema.get("properties", {}).items():
        enum = prop.get("enum") or ["x"]
        h = _h(image[-64:], text, name)
        if enum == ["accept", "reject"]:
            out[name] = "reject" if (h % 10_000) / 10_000 < reject_rate else "accept"
        elif name == "category":
            choices = [e for e in enum if e != "none"] or enum
            out[name] = choices[h % len(choices)]
        else:
            choices = enum[:-1] if len(enum) > 1 else enum
            out[name] = choices[h % len(choices)]
    return out


def _image_and_text(body: dict) -> tuple[str, str]:
    image, text = "", ""
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            text += content
            continue
        for part in content or []:
            if part.get("type") == "image_url":
                image = part["image_url"]["url"]
            elif part.get("type") == "text":
                text += part["text"]
    return image, text


class ScriptedOpenAI:
    """The server. ``faults`` maps fault kinds (see module docstring) to rates in [0, 1] (their sum at most 1);
    ``answer(schema, body)`` overrides :func:`default_answer`; ``latency_s`` delays every chat answer;
    ``version`` is what ``GET /version`` reports (None: 404, as a non-vLLM server)."""

    def __init__(self, model: str = "scripted/vlm", *, faults: dict[str, float] | None = None, seed: int = 0,
                 slow_s: float = 2.0, latency_s: float = 0.0, reject_rate: float = 0.0,
                 answer: Callable[[dict, dict], dict] | None = None, version: str | None = "0.0.0+scripted",
                 inspect_images: bool = True, host: str = "127.0.0.1", port: int = 0):
        unknown = set(faults or {}) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        if sum((faults or {}).values()) > 1:
            raise ValueError("fault rates sum above 1")
        self.model, self.faults, self.slow_s, self.latency_s = model, dict(faults or {}), slow_s, latency_s
        self.reject_rate, self.answer, self.version = reject_rate, answer, version
        self.inspect_images, self.host, self.port = inspect_images, host, port
        self.rng = random.Random(seed)
        self.log: list[dict[str, Any]] = []
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._n = 0

    # ------------------------------------------------------------------------------------------- control

    @property
    def url(self) -> str:
        """The API base URL, ``http://127.0.0.1:<port>/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> "ScriptedOpenAI":
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="scripted-openai", daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, self.host, self.port, backlog=1024), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop

        async def _shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for t in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                t.cancel()

        asyncio.run_coroutine_threadsafe(_shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        loop.close()
        self._loop = None

    def __enter__(self) -> "ScriptedOpenAI":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requests(self, kind_prefix: str = "") -> list[dict]:
        """Logged chat requests whose schema title starts with ``kind_prefix``."""
        with self._lock:
            return [r for r in self.log if r["schema"].startswith(kind_prefix)]

    # ---------------------------------------------------------------------------------------------- HTTP

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length") or 0)
                body = await reader.readexactly(n) if n else b""
                if not await self._route(method, path.split("?")[0], body, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError, ValueError):
            pass
        finally:
            try:
                writer.close()
            except RuntimeError:
                pass

    async def _send(self, writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        writer.write(f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: keep-alive\r\n\r\n".encode() + data)
        await writer.drain()

    async def _route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path == "/v1/models":
            await self._send(writer, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "scripted"}]})
            return True
        if method == "GET" and path == "/version":
            if self.version is None:
                await self._send(writer, 404, {"detail": "Not Found"})
            else:
                await self._send(writer, 200, {"version": self.version})
            return True
        if method == "POST" and path == "/v1/chat/completions":
            return await self._chat(json.loads(body or b"{}"), writer)
        await self._send(writer, 404, {"detail": "Not Found"})
        return True

    def _pick_fault(self) -> str | None:
        with self._lock:
            x = self.rng.random()
        acc = 0.0
        for kind in FAULTS:
            acc += self.faults.get(kind, 0.0)
            if x < acc:
                return kind
        return None

    async def _chat(self, req: dict, writer: asyncio.StreamWriter) -> bool:
        rf = req.get("response_format") or {}
        schema = (rf.get("json_schema") or {}).get("schema")
        entry: dict[str, Any] = {"schema": (schema or {}).get("title", ""), "fault": None, "model": req.get("model"),
                                 "extra": {k: req[k] for k in ("structured_outputs",) if k in req},
                                 "max_tokens": req.get("max_tokens"), "temperature": req.get("temperature")}
        if req.get("model") != self.model:
            await self._send(writer, 404, {"object": "error", "message": f"The model `{req.get('model')}` does not "
                                           "exist.", "type": "NotFoundError", "code": 404})
            return True
        if rf.get("type") != "json_schema" or not isinstance(schema, dict):
            await self._send(writer, 400, {"object": "error", "message": "response_format json_schema required",
                                           "type": "BadRequestError", "code": 400})
            return True
        image, text = _image_and_text(req)
        entry["image_sha256"] = hashlib.sha256(image.encode()).hexdigest()
        entry["prompt"] = text
        if self.inspect_images and image.startswith("data:image/"):
            from PIL import Image

            im = Image.open(io.BytesIO(base64.b64decode(image.split(",", 1)[1])))
            entry["image_size"] = im.size
        fault = self._pick_fault()
        entry["fault"] = fault
        with self._lock:
            self._n += 1
            n = self._n
            self.log.append(entry)
            self.counts[fault or "ok"] += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if fault == "drop":
            writer.transport.abort()
            return False
        if fault in ("http_500", "http_400"):
            code = int(fault[-3:])
            await self._send(writer, code, {"object": "error", "message": f"scripted {fault}",
                                            "type": "InternalServerError" if code == 500 else "BadRequestError",
                                            "code": code})
            return True
        answer = (self.answer or (lambda s, b: default_answer(s, b, self.reject_rate)))(schema, req)
        content, finish = json.dumps(answer, separators=(",", ":")), "stop"
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
        elif fault == "malformed_json":
            content = "{" + content[1:].replace(":", " ", 1) + ",,"
        elif fault == "truncated":
            content, finish = content[: max(1, len(content) // 2)], "length"
        elif fault == "schema_invalid":
            first = next(iter(answer), "x")
            content = json.dumps({**answer, first: "definitely-not-in-the-enum"})
        await self._send(writer, 200, {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="scripted/vlm")
    ap.add_argument("--latency-s", type=float, default=0.0)
    ap.add_argument("--no-inspect-images", action="store_true")
    a = ap.parse_args(argv)
    srv = ScriptedOpenAI(a.model, latency_s=a.latency_s, inspect_images=not a.no_inspect_images, port=a.port).start()
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
