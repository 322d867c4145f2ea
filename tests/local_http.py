"""A throwaway HTTP server on 127.0.0.1 for tests that need a misbehaving site or mirror: :func:`serve` starts a
``ThreadingHTTPServer`` of the given handler in a daemon thread, with ``hits`` (a list the handler may append
requested paths to) and ``base_url`` (``http://127.0.0.1:<port>``); :func:`stop` shuts it down and closes it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.hits = []
    srv.base_url = f"http://127.0.0.1:{srv.server_address[1]}"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def stop(srv: ThreadingHTTPServer) -> None:
    srv.shutdown()
    srv.server_close()
