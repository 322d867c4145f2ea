"""The DNS resolver of the crawl: every name's address is checked against the egress policy where Twisted takes
the address it will connect to, so the checked address is the connected one (no DNS rebinding between a check and
the connection). ``DNS_RESOLVER = "lookbench_crawlers.resolver.GuardedResolver"`` (settings).

Settings: ``LOOKBENCH_EGRESS_PORTS`` (ports a global address may be reached on; default 80, 443),
``LOOKBENCH_EGRESS_ALLOW`` (exact ``ip:port`` pairs allowed whatever the address: the demo or replay server),
``LOOKBENCH_STATIC_HOSTS`` (JSON ``{name: ip}`` answered before DNS, like ``/etc/hosts``; an empty ip answers
that the name does not exist: test hosts, and the tests' stub resolver), ``LOOKBENCH_REPLAY_WARC`` (a replay resolves nothing: every answer is refused).
"""

from __future__ import annotations

import json

from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer
from twisted.internet.error import DNSLookupError

from lookbench_pipeline.egress import NOT_GLOBAL, UNRESOLVABLE, EgressPolicy, configured_addresses, is_ip


# name -> why the resolver refused it, for this crawl process: Twisted turns a resolver's failure into "no results
# for hostname lookup", so the request's errback reads the reason here (middlewares.refusal_reason).
REFUSED: dict[str, str] = {}


class AddressRefusedError(DNSLookupError):
    """A name resolved to an address the egress policy refuses (``reason``: ``address_not_global``…), or did not
    resolve (``name_not_resolved``)."""

    def __init__(self, name: str, reason: str, address: str | None = None):
        super().__init__(f"{name}: {reason}" + (f" ({address})" if address else ""))
        self.reason = reason
        REFUSED[name.lower().rstrip(".")] = reason


def static_hosts_from_settings(settings) -> dict[str, str]:
    """``LOOKBENCH_STATIC_HOSTS`` as ``{lower-case name: ip}`` (a JSON string or a dict; an empty ip: the name does
    not exist)."""
    static = settings.get("LOOKBENCH_STATIC_HOSTS") or {}
    if isinstance(static, str):
        static = json.loads(static) if static.strip() else {}
    return {k.lower(): v for k, v in static.items()}


def policy_from_settings(settings) -> EgressPolicy:
    ports = [int(p) for p in settings.getlist("LOOKBENCH_EGRESS_PORTS") or [80, 443]]
    return EgressPolicy.from_strings(ports, settings.getlist("LOOKBENCH_EGRESS_ALLOW"))


class GuardedResolver(CachingThreadedResolver):
    """Scrapy's caching threaded resolver, with each answer checked by ``EgressPolicy`` for the global-address
    rule (the port is checked by ``middlewares.AddressPolicyMiddleware``, which knows it). An address that is not
    globally routable but allowed by a ``LOOKBENCH_EGRESS_ALLOW`` pair (the demo or replay server on loopback) is
    reached only as an IP literal or through names the configuration gives it (``egress.configured_addresses``:
    ``localhost`` and ``LOOKBENCH_STATIC_HOSTS``), whose port the middleware checks against the pair: a site's own
    name that resolves there (DNS rebinding) is refused (``address_not_global``), since its port could be any
    allowed one."""

    def __init__(self, reactor, cache_size, timeout, policy: EgressPolicy | None = None,
                 static_hosts: dict[str, str] | None = None, replay: bool = False):
        super().__init__(reactor, cache_size, timeout)
        self.policy = policy or EgressPolicy()
        self.static_hosts = {k.lower(): v for k, v in (static_hosts or {}).items()}
        self.replay = replay

    @classmethod
    def from_crawler(cls, crawler, reactor):
        s = crawler.settings
        cache_size = s.getint("DNSCACHE_SIZE") if s.getbool("DNSCACHE_ENABLED") else 0
        resolver = cls(reactor, cache_size, s.getfloat("DNS_TIMEOUT"), policy_from_settings(s),
                       static_hosts_from_settings(s), bool(s.getlist("LOOKBENCH_REPLAY_WARC")))
        # Scrapy builds the resolver from the CrawlerProcess (its command-line settings), possibly before its
        # spiders exist: their crawlers' own allowances (the shop spider sets its site's in
        # ShopSpider.from_crawler) are added at the first lookup, when the spiders have been made
        resolver.process = crawler if hasattr(crawler, "crawlers") else None
        return resolver

    def _policy(self) -> EgressPolicy:
        process, self.process = getattr(self, "process", None), None
        if process is not None:
            allowed = set(self.policy.allowed).union(
                *(policy_from_settings(c.settings).allowed for c in list(process.crawlers)))
            self.policy = EgressPolicy(self.policy.ports, frozenset(allowed))
        return self.policy

    def getHostByName(self, name, timeout=()):
        if self.replay:
            return defer.fail(AddressRefusedError(name, "replay_resolves_nothing"))
        if name.lower() in self.static_hosts and not self.static_hosts[name.lower()]:
            return defer.fail(AddressRefusedError(name, UNRESOLVABLE))  # a static "does not exist" answer
        static = self.static_hosts.get(name.lower())
        d = defer.succeed(static) if static else super().getHostByName(name, timeout)
        d.addCallbacks(lambda ip: self._check(name, ip), lambda f: self._unresolved(name, f))
        return d

    def _check(self, name: str, ip: str) -> str:
        policy = self._policy()
        reason = policy.refusal(ip, None)  # the port is the middleware's check, which knows it
        if reason is None and not policy.routable(ip) and not (
                is_ip(name) or configured_addresses(name, self.static_hosts) is not None):
            reason = NOT_GLOBAL  # an allowed pair's address, through a name the configuration did not give it
        if reason:
            raise AddressRefusedError(name, reason, ip)
        return ip

    def _unresolved(self, name: str, failure):
        if failure.check(AddressRefusedError):
            return failure
        raise AddressRefusedError(name, UNRESOLVABLE)
