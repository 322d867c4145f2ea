"""The one reading of a fetch that got no response: the crawl log's reason for a page (``ShopSpider.on_error``) and
the download row's for an image (``pipelines._failure_reason``), from the exception Scrapy or Twisted raised.

A small stable vocabulary, whatever Scrapy version or download handler wrapped the error (Scrapy 2.13+ wraps
Twisted's in its own ``Download*Error``; a ``ResponseFailed`` carries its causes in ``reasons``):

* ``download_timeout``: the connection or the download timed out (``TCPTimedOutError``, ``DownloadTimeoutError``,
  Twisted's ``TimeoutError``), the same reason as a URL whose download budget ran out
  (``middlewares.DownloadTimeout``);
* ``too_large_bytes``: cancelled because the response announced more than the size limit; ``download_cancelled``:
  any other cancel (the crawl stopping);
* ``name_not_resolved``: DNS found no address (the egress policy's reason; its own refusals keep theirs:
  ``middlewares.refusal_reason``, asked first by both callers);
* ``fetch_error:tls``: the TLS handshake or certificate failed;
* ``fetch_error:connection_refused``: nothing listens on the port;
* ``fetch_error:connect_failed``: the connection could not be made otherwise (no route to the host, network
  unreachable);
* ``fetch_error:connection_lost``: the connection closed before the whole response came (reset, closed by the
  server, data lost);
* ``fetch_error:other:<exception class>``: anything else, the innermost cause's class (the crawl log has no column
  for the detail; the spider's log has the traceback).

The exception's own class is counted as well, in the crawl's stats (``lookbench/fetch_errors/<reason>/<class>``,
``ShopSpider.on_error``), so the reason is readable and no detail is lost.
"""

from __future__ import annotations

FETCH_ERROR = "fetch_error"
DOWNLOAD_TIMEOUT = "download_timeout"
TOO_LARGE = "too_large_bytes"
DOWNLOAD_CANCELLED = "download_cancelled"
NAME_NOT_RESOLVED = "name_not_resolved"
TLS = "fetch_error:tls"
CONNECTION_REFUSED = "fetch_error:connection_refused"
CONNECT_FAILED = "fetch_error:connect_failed"
CONNECTION_LOST = "fetch_error:connection_lost"
OTHER = "fetch_error:other"

# (reason, class names): the first reason one of whose names is in the failure's chain wins (after TLS and
# timeouts: a TLS error a ResponseNeverReceived carries is tls, not connection_lost; a TCP timeout, a
# ConnectError, is a timeout)
_BY_CLASS = (
    (TLS, {"SSLError", "TLSError", "CertificateError", "SSLCertVerificationError", "VerificationError"}),
    (CONNECTION_REFUSED, {"ConnectionRefusedError", "DownloadConnectionRefusedError"}),
    (NAME_NOT_RESOLVED, {"DNSLookupError", "CannotResolveHostError"}),
    (DOWNLOAD_CANCELLED, {"CancelledError", "DownloadCancelledError"}),
    (CONNECT_FAILED, {"ConnectError", "NoRouteError", "ConnectBindError", "ConnectingCancelledError"}),
    (CONNECTION_LOST, {"ConnectionLost", "ConnectionDone", "ConnectionAborted", "ConnectionClosed",
                       "ConnectionResetError", "BrokenPipeError", "ResponseFailed", "ResponseNeverReceived",
                       "RequestTransmissionFailed", "RequestNotSent", "DownloadFailedError",
                       "ResponseDataLossError", "_DataLoss", "PotentialDataLoss"}),
)


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception behind it, nearest first: ``__cause__`` (else ``__context__``), and the
    failures a Twisted ``ResponseFailed`` / ``ResponseNeverReceived`` carries in ``reasons``. Each once."""
    out: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or any(e is seen for seen in out):
            continue
        out.append(e)
        todo.append(e.__cause__ or e.__context__)
        for r in getattr(e, "reasons", None) or []:  # twisted Failures
            value = getattr(r, "value", r)
            if isinstance(value, BaseException):
                todo.append(value)
    return out


def _tls(e: BaseException) -> bool:
    return (type(e).__module__ or "").startswith(("OpenSSL", "ssl", "service_identity"))


def fetch_error_reason(exc: BaseException) -> str:
    """The reason of a fetch that failed with ``exc`` and no response (module docstring)."""
    chain = causes(exc)
    names = {c.__name__ for e in chain for c in type(e).__mro__}
    if any(_tls(e) for e in chain):
        return TLS
    if any("timeout" in n.lower() or n.endswith("TimedOutError") for n in names):  # httpx's ReadTimeout too
        return DOWNLOAD_TIMEOUT
    for reason, known in _BY_CLASS:
        if names & known:
            if reason == DOWNLOAD_CANCELLED and any("max size" in str(e).lower() for e in chain):
                return TOO_LARGE  # Scrapy's cancel of a response announced over download_maxsize
            return reason
    return f"{OTHER}:{type(chain[-1]).__name__}"
