"""Why a request to a model endpoint (the vLLM server the annotation and judging stages ask, the image endpoint the
generation stage asks) failed, in words a data engineer can act on: :func:`classify` names the kind of failure,
:func:`describe` says it with the endpoint's URL.

The ``openai`` client reports every failure to connect as ``APIConnectionError``, and its aiohttp transport even as
``APITimeoutError`` ("Request timed out."), a port nothing listens on included: which reads as "raise the timeout"
when the server is simply not running. The exception's cause chain (``__cause__`` / ``__context__``: the transport's
error, then the socket's) says what really happened. Imports no sibling."""

from __future__ import annotations

import errno
from urllib.parse import urlsplit

KINDS = ("connection_refused", "name_not_resolved", "timeout", "http_status", "connection_error")
"""What :func:`classify` answers: nothing listening at the host and port; the host name not found (DNS); no answer
in time; an answer with an HTTP error status; any other failure to connect (a connection reset or dropped)."""

_DNS_TEXT = ("name or service not known", "nodename nor servname", "no address associated with hostname",
             "getaddrinfo failed", "name resolution")  # the last covers "temporary failure in name resolution"
_DNS_TYPES = ("gaierror", "ClientConnectorDNSError")
_DISCONNECT_TYPES = ("ServerDisconnectedError", "ClientOSError", "ClientConnectorError", "RemoteProtocolError",
                     "ReadError", "WriteError", "ClientPayloadError")
_TIMEOUT_TYPES = ("TimeoutError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "TimeoutException",
                  "ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _names(e: BaseException) -> set[str]:
    return {t.__name__ for t in type(e).__mro__}


def classify(exc: BaseException) -> str:
    """The kind of failure (one of :data:`KINDS`) of a request that raised ``exc``, read from its cause chain: a
    refused connection (``ConnectionRefusedError``, ``ECONNREFUSED``) and an unresolved host name (``gaierror``)
    are told apart from a real timeout, whatever the ``openai`` exception around them says."""
    chain = _chain(exc)
    if any(isinstance(getattr(e, "status_code", None), int) for e in chain):
        return "http_status"
    causes = chain[1:] or chain
    for e in causes:
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return "connection_refused"
    for e in causes:
        if _names(e) & set(_DNS_TYPES) or any(t in str(e).lower() for t in _DNS_TEXT):
            return "name_not_resolved"
    if any("connection refused" in str(e).lower() for e in causes):  # said only in words (the type: above)
        return "connection_refused"
    if any(isinstance(e, TimeoutError) for e in causes):
        return "timeout"
    # before the transport's own timeout types: the aiohttp transport wraps a dropped connection in ConnectTimeout
    if any(isinstance(e, ConnectionError) or _names(e) & set(_DISCONNECT_TYPES) for e in causes):
        return "connection_error"
    if any(_names(e) & set(_TIMEOUT_TYPES) for e in causes):
        return "timeout"
    return "timeout" if "Timeout" in type(exc).__name__ else "connection_error"


def _host(url: str) -> str:
    try:
        p = urlsplit(url)
        port = p.port or (443 if p.scheme == "https" else 80)
        return f"{p.hostname}:{port}" if p.hostname else url
    except ValueError:
        return url


def describe(exc: BaseException, url: str, timeout_s: float | None = None) -> str:
    """``exc`` (a failed request to the endpoint at ``url``) in words: ``connection refused: nothing answered at
    http://127.0.0.1:8000/v1 (nothing listens on 127.0.0.1:8000)...``, ``host name not resolved...``,
    ``timeout...``, ``HTTP 503...`` or ``connection failed...``, each naming the URL."""
    kind = classify(exc)
    root = _chain(exc)[-1]
    if kind == "connection_refused":
        return (f"connection refused: nothing answered at {url} (nothing listens on {_host(url)}): is the server "
                f"running, on that port? Not a timeout: a longer timeout will not help")
    if kind == "name_not_resolved":
        host = urlsplit(url).hostname or url
        return f"host name not resolved: {host!r} of {url} is not known (DNS): check the URL"
    if kind == "timeout":
        within = f" within {timeout_s:g} s" if timeout_s else ""
        return f"timeout: {url} did not answer{within}"
    if kind == "http_status":
        status = next(e.status_code for e in _chain(exc) if isinstance(getattr(e, "status_code", None), int))
        return f"HTTP {status} from {url}: {str(exc)[:200]}"
    return f"connection failed to {url}: {type(root).__name__}: {str(root)[:200]}"
