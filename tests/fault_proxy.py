"""A fault-injecting HTTP proxy for S3 tests: it sits on 127.0.0.1 in front of a real S3-compatible server (moto's
server mode) and

* answers a share of requests with an S3 5xx error (``500 InternalError``, ``503 ServiceUnavailable`` or
  ``SlowDown``), either before the
  request reaches the server (``after_rate=0``) or after the server has carried it out (the client then retries
  an operation that already happened);
* stops like a crashed server once ``stop_after_upload_bytes`` request-body bytes have gone through: it cuts the
  upload in progress in the middle of its body, closes every connection and refuses new ones.

Every request is recorded (method, path with query, status, and the checksum headers it carried).
"""

from __future__ import annotations

import http.client
import random
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "expect"}


@dataclass
class Seen:
    method: str
    path: str
    status: int
    injected: bool
    headers: dict[str, str] = field(default_factory=dict)


class FaultProxy:
    def __init__(self, upstream: str, error_rate: float = 0.0, after_rate: float = 0.0, seed: int = 0,
                 stop_after_upload_bytes: int | None = None):
        u = urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.error_rate, self.after_rate = error_rate, after_rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.budget = stop_after_upload_bytes
        self.stopped = threading.Event()
        self.seen: list[Seen] = []
        self.uploaded = 0
        self.sockets: set[socket.socket] = set()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def setup(self):
                super().setup()
                with proxy.lock:
                    proxy.sockets.add(self.connection)

            def finish(self):
                with proxy.lock:
                    proxy.sockets.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def do_GET(self):
                proxy._handle(self)

            do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # --- fault decisions
    def _roll(self) -> tuple[bool, bool]:
        with self.lock:
            r = self.rng.random()
        return r < self.error_rate, self.error_rate <= r < self.error_rate + self.after_rate

    def _crash(self, h: BaseHTTPRequestHandler) -> None:
        """Behave like a server that died: drop every connection and stop listening."""
        if not self.stopped.is_set():
            self.stopped.set()
            threading.Thread(target=self._shutdown, daemon=True).start()
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            socks = list(self.sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _read_body(self, h: BaseHTTPRequestHandler) -> bytes | None:
        n = int(h.headers.get("Content-Length") or 0)
        chunks, got = [], 0
        while got < n:
            want = min(65536, n - got)
            if self.budget is not None:
                with self.lock:
                    left = self.budget - self.uploaded
                if left <= 0:
                    return None
                want = min(want, left)
            chunk = h.rfile.read(want)
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
            with self.lock:
                self.uploaded += len(chunk)
        return b"".join(chunks)

    def _reply(self, h: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        h.send_response(status)
        for k, v in headers:
            if k.lower() not in HOP and k.lower() != "content-length":
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)) if h.command != "HEAD" else
                      dict((k.lower(), v) for k, v in headers).get("content-length", "0"))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _error(self, h: BaseHTTPRequestHandler, status: int) -> None:
        # S3's transient errors: mostly 500 InternalError and 503 ServiceUnavailable, now and then 503 SlowDown
        # (which botocore treats as throttling and backs off from for longer)
        k = self.injected
        code = "InternalError" if status == 500 else ("SlowDown" if k % 10 == 0 else "ServiceUnavailable")
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected by the test '
                f'proxy</Message><Resource>{h.path}</Resource></Error>').encode()
        self._reply(h, status, [("Content-Type", "application/xml")], body)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        if self.stopped.is_set():
            return self._crash(h)
        checksum_headers = {k.lower(): v for k, v in h.headers.items()
                            if "checksum" in k.lower() or k.lower() == "x-amz-trailer"
                            or (k.lower() == "content-encoding" and "aws-chunked" in v)}
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
            raise AssertionError("the client sent a chunked (trailer) body; S3Store must send Content-Length")
        body = self._read_body(h)
        if body is None:  # the budget ran out in the middle of this body: the server "dies"
            self.seen.append(Seen(h.command, h.path, 0, True, checksum_headers))
            return self._crash(h)
        before, after = self._roll()
        if before:
            status = 503 if len(self.seen) % 2 else 500
            self.seen.append(Seen(h.command, h.path, status, True, checksum_headers))
            return self._error(h, status)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP}
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(h.command, h.path, body=body if body or h.command in ("PUT", "POST") else None,
                         headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            resp_headers = resp.getheaders()
            status = resp.status
        finally:
            conn.close()
        if after and status < 300:
            self.seen.append(Seen(h.command, h.path, 500, True, checksum_headers))
            return self._error(h, 500)
        self.seen.append(Seen(h.command, h.path, status, False, checksum_headers))
        self._reply(h, status, resp_headers, data)

    def close(self) -> None:
        if not self.stopped.is_set():
            self.stopped.set()
            self._shutdown()

    @property
    def injected(self) -> int:
        return sum(s.injected for s in self.seen)
