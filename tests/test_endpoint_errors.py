"""A model endpoint that cannot be reached says why (lookbench_pipeline/endpoint_errors.py): a port nothing listens
on reads "connection refused: nothing answered at <url>", not the ``openai`` client's "Request timed out." (its
aiohttp transport reports a refused connection as ``APITimeoutError``), which would send the data engineer to raise
timeouts; an unknown host, a real timeout and an HTTP error status each read as what they are."""

from __future__ import annotations

import io
import socket
import threading

import pytest
from PIL import Image

from lookbench_pipeline import aigen
from lookbench_pipeline.config import AigenEndpointConfig
from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.vlm import ImageItem, VlmAnnotator, VlmEndpointError


def _closed_port() -> int:
    """A local port nothing listens on: bound (so no one else has it), then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Silent:
    """A server that accepts connections and never answers (a real timeout)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self):
        try:
            while True:
                self.conns.append(self.sock.accept()[0])
        except OSError:
            return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        # shutdown wakes the thread blocked in accept() (close alone does not, on Linux: the thread would stay
        # blocked on a file descriptor number the next socket of the process may reuse)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        for c in self.conns:
            c.close()


def _annotate(url: str, **kw):
    buf = io.BytesIO()
    Image.new("RGB", (64, 96), (200, 30, 30)).save(buf, "PNG")
    tax = Taxonomy.load()
    ann = VlmAnnotator(url, "m", tax, **{"max_retries": 1, "timeout_s": 5, "backoff_s": 0.0, **kw})
    return ann.annotate_images([ImageItem("i", buf.getvalue(), category="dress")])


def _generate(url: str, tmp_path, timeout_s: float = 5):
    ecfg = AigenEndpointConfig(base_url=url, model_version="x", max_attempts=2, backoff_s=0, timeout_s=timeout_s)
    req = {"request_id": "r", "kind": "edit", "prompt": "x", "seed": 1, "size": "512x512",
           "reference_image_sha256": "ref"}
    return aigen.EndpointBackend(ecfg, url, "m", "v", tmp_path).one(req, b"png")


def test_annotation_endpoint_refusing_the_connection_says_so():
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(VlmEndpointError) as e:
        _annotate(url)
    msg = str(e.value)
    assert "connection refused" in msg and f"nothing answered at {url}" in msg, msg
    assert "unreachable after 2 tries" in msg
    assert "Timeout" not in msg and "timed out" not in msg, msg


def test_image_endpoint_refusing_the_connection_says_so(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    o = _generate(url, tmp_path)
    assert (o.status, o.reason, o.attempts) == ("failed", "connection_error", 2)  # the reason code as documented
    assert o.detail.startswith("connection refused: ") and f"nothing answered at {url}" in o.detail, o.detail


def test_once_nothing_answers_at_the_image_endpoint_the_requests_left_are_not_sent(tmp_path):
    """A generator that is not running: the first request fails on every attempt (connection refused); the others
    fail at once, 0 attempts, saying why (not ~7 s of retries and back-off each); every request has its outcome."""
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    ecfg = AigenEndpointConfig(base_url=url, model_version="x", max_attempts=2, backoff_s=0, timeout_s=5,
                               concurrency=1)
    reqs = [{"request_id": f"r{i}", "kind": "edit", "prompt": "x", "seed": i, "size": "512x512",
             "reference_image_sha256": "ref"} for i in range(4)]
    out = aigen.EndpointBackend(ecfg, url, "m", "v", tmp_path).run(reqs, {"ref": b"png"})
    assert sorted(out) == ["r0", "r1", "r2", "r3"]
    assert (out["r0"].status, out["r0"].reason, out["r0"].attempts) == ("failed", "connection_error", 2)
    for r in ("r1", "r2", "r3"):
        o = out[r]
        assert (o.status, o.reason, o.attempts) == ("failed", "connection_error", 0), o
        assert o.detail.startswith("not sent: an earlier request found nothing answering after 2 tries: "
                                   "connection refused: "), o.detail


def test_a_silent_endpoint_is_a_timeout_and_an_unknown_host_is_not(tmp_path):
    with _Silent() as srv:
        with pytest.raises(VlmEndpointError, match=r"timeout: .* did not answer within 0.5 s"):
            _annotate(srv.url, timeout_s=0.5, max_retries=0)
        o = _generate(srv.url, tmp_path, timeout_s=0.5)
    assert (o.reason, o.detail) == ("timeout", f"timeout: {srv.url} did not answer within 0.5 s")
    o = _generate("http://no-such-host.invalid/v1", tmp_path)
    assert o.reason == "connection_error" and o.detail.startswith("host name not resolved: 'no-such-host.invalid'")
    with pytest.raises(VlmEndpointError, match="host name not resolved"):
        _annotate("http://no-such-host.invalid/v1")


def test_classify_reads_the_cause_chain():
    import aiohttp
    import httpx
    import openai

    from lookbench_pipeline.endpoint_errors import classify, describe

    req = httpx.Request("GET", "http://h:1/v1/models")

    def wrapped(outer: BaseException, *causes: BaseException) -> BaseException:
        e = outer
        for c in causes:
            e.__cause__ = c
            e = c
        return outer

    refused = wrapped(openai.APITimeoutError(request=req), httpx.ConnectTimeout("Cannot connect"),
                      ConnectionRefusedError(111, "Connect call failed"))
    assert classify(refused) == "connection_refused"
    assert classify(wrapped(openai.APIConnectionError(request=req), httpx.ConnectError("x"),
                            socket.gaierror(-2, "Name or service not known"))) == "name_not_resolved"
    assert classify(wrapped(openai.APITimeoutError(request=req), httpx.ReadTimeout("read"))) == "timeout"
    assert classify(wrapped(openai.APITimeoutError(request=req), httpx.ConnectTimeout("x"),  # aiohttp transport
                            aiohttp.ServerTimeoutError("read"))) == "timeout"
    assert classify(wrapped(openai.APITimeoutError(request=req), httpx.ConnectTimeout("x"),  # a dropped connection
                            aiohttp.ServerDisconnectedError())) == "connection_error"
    assert classify(wrapped(openai.APIConnectionError(request=req), ConnectionResetError(104, "reset"))) \
        == "connection_error"
    status = openai.InternalServerError("boom", response=httpx.Response(503, request=req), body=None)
    assert classify(status) == "http_status" and describe(status, "http://h:1/v1").startswith("HTTP 503 from ")
