"""The egress guard for what a page rendered in Chromium (``render_js`` sites, scrapy-playwright) fetches itself:
scripts, styles, images, frames, ``fetch``/XHR calls. Chromium makes these requests and resolves their names on its
own, past Scrapy's middlewares and resolver, so the same policy (``lookbench_pipeline.egress``) is applied twice:

* **every request the page makes** goes through :func:`abort_request` (scrapy-playwright's
  ``PLAYWRIGHT_ABORT_REQUEST``, which sees each request before Chromium sends it): a scheme other than http(s)
  (``data:``/``blob:``/``about:`` need no network), a host outside the site's hosts (its start and sitemap hosts,
  ``allowed_hosts``, ``image_hosts``, ``render_hosts``; ``host_not_allowed``), a port or address the policy refuses
  (``port_not_allowed``, ``address_not_global``), or a name that did not pass (below) is aborted; each refusal is
  counted (``lookbench/render_refused/<reason>``) and reported to the page's request (:func:`bind_page`), from which
  the spider writes one crawl-log row per refused URL (outcome ``subresource_refused``, the reason);
* **every name Chromium resolves** is pinned: when the crawl starts, each host name of the site is resolved once
  (``LOOKBENCH_STATIC_HOSTS`` first, as the Scrapy resolver does) and checked; Chromium is launched with
  ``--host-resolver-rules`` that map each name that passed to its checked address and every other name to "not
  found". So a name cannot resolve to another address later (DNS rebinding), and a request that escapes request
  routing (a WebSocket, a service worker's fetch) cannot reach a name outside the list either.

One crawl runs per process (as ``resolver.REFUSED``): :func:`install` sets the module's guard for it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import weakref
from urllib.parse import urlsplit

from lookbench_pipeline.crawl import SUBRESOURCE_REFUSED  # noqa: F401 (the crawl-log outcome; one owner)
from lookbench_pipeline.egress import UNRESOLVABLE, EgressPolicy, is_ip, split_host_port

log = logging.getLogger(__name__)

NO_NETWORK_SCHEMES = frozenset({"data", "blob", "about"})
DEFAULT_PORTS = {"http": 80, "https": 443}

GUARD: "RenderGuard | None" = None
# a Playwright page -> the refusals list of the Scrapy request it renders (request.meta["lookbench_render_refused"])
PAGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class RenderGuard:
    """``hosts``: the host names and ``host:port`` netlocs a rendered page may fetch from; ``names``: name -> its
    checked address, or the reason it was refused (``address_not_global``, ``name_not_resolved``)."""

    def __init__(self, hosts, policy: EgressPolicy, names: dict[str, tuple[str | None, str | None]], crawler=None):
        self.hosts = {h.lower() for h in hosts if h}
        self.policy, self.names, self.crawler = policy, names, crawler

    def refusal(self, url: str) -> str | None:
        """Why a rendered page may not fetch ``url``, or None."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in NO_NETWORK_SCHEMES:
            return None
        if scheme not in DEFAULT_PORTS:
            return "scheme_not_allowed"
        host = (parts.hostname or "").lower()
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError:
            return "port_not_allowed"
        if host not in self.hosts and parts.netloc.lower() not in self.hosts:
            return "host_not_allowed"
        if is_ip(host):
            return self.policy.refusal(host, port)
        ip, reason = self.names.get(host, (None, UNRESOLVABLE))
        return reason or self.policy.refusal(ip, port)

    def resolver_rules(self) -> str:
        """Chromium's ``--host-resolver-rules``: every checked name mapped to its address, the site's IP-literal
        hosts left as they are (:meth:`refusal` checks their address and port), every other name and address not
        found."""
        rules = []
        for name, (ip, reason) in sorted(self.names.items()):
            if not reason:
                rules.append(f"MAP {name} {_bracket(ip)}")
        literals = sorted({_host(h) for h in self.hosts if is_ip(_host(h))})
        return ", ".join(rules + [f"EXCLUDE {_bracket(ip)}" for ip in literals] + ["MAP * ~NOTFOUND"])


def check_names(names, policy: EgressPolicy, static_hosts: dict[str, str] | None = None,
                lookup=None) -> dict[str, tuple[str | None, str | None]]:
    """Resolve each host name once (``static_hosts`` first: an empty answer is "does not exist") and check its
    address: ``{name: (ip, None)}`` or ``{name: (None, reason)}``. A name with several addresses is refused if any
    is (the one Chromium picks is not known)."""
    static = {k.lower(): v for k, v in (static_hosts or {}).items()}
    lookup = lookup or (lambda n: sorted({ai[4][0] for ai in socket.getaddrinfo(n, None, type=socket.SOCK_STREAM)}))
    out: dict[str, tuple[str | None, str | None]] = {}
    for name in sorted({n.lower() for n in names if n and not is_ip(n)}):
        try:
            ips = ([static[name]] if static[name] else []) if name in static else lookup(name)
        except OSError:
            ips = []
        if not ips:
            out[name] = (None, UNRESOLVABLE)
            continue
        reasons = [policy.refusal(ip, None) for ip in ips]
        bad = next((r for r in reasons if r), None)
        out[name] = (None, bad) if bad else (str(ipaddress.ip_address(ips[0].split("%")[0])), None)
    return out


def install(crawler, hosts, policy: EgressPolicy, static_hosts: dict[str, str] | None = None) -> RenderGuard:
    """Set this process's guard for a ``render_js`` crawl, route Playwright's requests through it
    (``PLAYWRIGHT_ABORT_REQUEST``) and pin Chromium's names (``--host-resolver-rules`` added to
    ``PLAYWRIGHT_LAUNCH_OPTIONS``). Called by the spider while the settings can still change."""
    global GUARD
    names = check_names({_host(h) for h in hosts}, policy, static_hosts)
    GUARD = RenderGuard(hosts, policy, names, crawler)
    s = crawler.settings
    launch = dict(s.getdict("PLAYWRIGHT_LAUNCH_OPTIONS"))
    launch["args"] = [a for a in launch.get("args", []) if not a.startswith("--host-resolver-rules")] + [
        f"--host-resolver-rules={GUARD.resolver_rules()}"]
    s.set("PLAYWRIGHT_LAUNCH_OPTIONS", launch, priority="cmdline")
    s.set("PLAYWRIGHT_ABORT_REQUEST", f"{__name__}.abort_request", priority="cmdline")
    refused = {n: r for n, (_, r) in names.items() if r}
    if refused:
        log.warning("render guard: names a rendered page may not reach: %s", refused)
    return GUARD


def _bracket(ip: str) -> str:
    return f"[{ip.strip('[]')}]" if ":" in ip else ip


def _host(netloc: str) -> str:
    try:
        return split_host_port(netloc)[0]
    except ValueError:
        return netloc


async def bind_page(page, request) -> None:
    """scrapy-playwright's ``playwright_page_init_callback``: the refusals of ``page`` go to ``request``'s meta
    (``lookbench_render_refused``: ``[(url, reason)]``), which the spider reads with the response."""
    PAGES[page] = request.meta.setdefault("lookbench_render_refused", [])


def abort_request(playwright_request) -> bool:
    """scrapy-playwright's ``PLAYWRIGHT_ABORT_REQUEST``: True (abort) when the guard refuses the request, or when
    there is no guard or it fails (closed by default)."""
    try:
        reason = GUARD.refusal(playwright_request.url) if GUARD is not None else "egress_guard_not_installed"
    except Exception as exc:  # a bug here must not open the door
        log.warning("render guard failed on %s: %r", playwright_request.url, exc)
        reason = "egress_guard_error"
    if reason:
        _record(playwright_request, reason)
    return bool(reason)


def _record(playwright_request, reason: str) -> None:
    stats = getattr(getattr(GUARD, "crawler", None), "stats", None)
    if stats is not None:
        stats.inc_value(f"lookbench/render_refused/{reason}")
    try:
        refused = PAGES.get(playwright_request.frame.page)
    except Exception:  # a service worker's request has no frame
        refused = None
    if refused is not None:
        refused.append((playwright_request.url, reason))
    else:
        if stats is not None:
            stats.inc_value("lookbench/render_refused/unattributed")
        log.warning("render guard: refused %s (%s) for no known page", playwright_request.url, reason)
