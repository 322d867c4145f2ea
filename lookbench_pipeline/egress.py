"""The egress policy of a crawl: which addresses and ports a request may connect to. Pure functions, no network.

An allow-list, not a deny-list: a crawl connects only to globally routable addresses (``ipaddress``'s
``is_global``: not loopback, private, link-local, shared address space 100.64.0.0/10, benchmarking, reserved,
multicast or unspecified; IPv6 site-local fec0::/10 and the reserved ::/8, which holds the deprecated
IPv4-compatible ``::a.b.c.d``, are refused too, since Python 3.11's ``is_global`` passes them). An IPv6 address that
carries an IPv4 address a gateway forwards to is judged by that IPv4 address as well: IPv4-mapped ``::ffff:a.b.c.d``,
the NAT64 well-known prefix 64:ff9b::/96 (RFC 6052; ``64:ff9b::a9fe:a9fe`` reaches 169.254.169.254 through a
NAT64 gateway), 6to4 2002::/16 (RFC 3056); the local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215) is refused
whole. Connections go on an allowed port (80 and
443 unless the site config names others), plus the exact ``host:port`` pairs a config allows for a named test or
demo host (the demo shop and the replay server on ``127.0.0.1:<their port>``). A name that does not resolve is
refused. The check is made on the address the connection will use (``lookbench_crawlers.resolver``), so a name
that resolves to another address later (DNS rebinding) cannot slip past a check made earlier.

Sources: RFC 6890 (special-purpose address registries), RFC 6052 / 8215 (NAT64 prefixes), RFC 3056 (6to4),
RFC 3879 (site-local deprecated), RFC 6598 (100.64.0.0/10), the cloud metadata services at
169.254.169.254 and 100.100.100.200 that a server-side request must never reach (OWASP, "Server Side Request
Forgery Prevention Cheat Sheet").
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_PORTS = frozenset({80, 443})

NOT_GLOBAL = "address_not_global"
PORT_NOT_ALLOWED = "port_not_allowed"
UNRESOLVABLE = "name_not_resolved"

LOCALHOST_ADDRESSES = ("127.0.0.1", "::1")
"""What ``localhost`` resolves to (IPv4 and IPv6 loopback)."""

_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")


def reached_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address
                    ) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address a connection to ``addr`` ends at when a gateway translates it: the IPv4 address of an
    IPv4-mapped (``::ffff:a.b.c.d``) or NAT64 well-known-prefix (``64:ff9b::a.b.c.d``, RFC 6052) address, else
    ``addr``."""
    if addr.version == 6:
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
        if addr in _NAT64_WELL_KNOWN:
            return ipaddress.IPv4Address(int(addr) & 0xFFFF_FFFF)
    return addr


def is_routable(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True when ``addr`` (after :func:`reached_address`) is globally routable and unicast: ``is_global``, not
    multicast, not reserved, not IPv6 site-local, not in the local-use NAT64 prefix, and for a 6to4 address its
    embedded IPv4 address routable too."""
    addr = reached_address(addr)
    if not addr.is_global or addr.is_multicast or addr.is_reserved:
        return False
    if addr.version == 6:
        if addr.is_site_local or addr in _NAT64_LOCAL_USE:
            return False
        if addr.sixtofour is not None and not is_routable(addr.sixtofour):
            return False
    return True


@dataclass(frozen=True)
class EgressPolicy:
    """``ports``: the ports any global address may be reached on. ``allowed``: exact ``(ip, port)`` pairs allowed
    whatever the address (a test or demo host); ``port`` None allows every port of that address."""

    ports: frozenset[int] = DEFAULT_PORTS
    allowed: frozenset[tuple[str, int | None]] = field(default_factory=frozenset)

    @classmethod
    def from_strings(cls, ports: Iterable[int] = DEFAULT_PORTS, allowed: Iterable[str] = ()) -> "EgressPolicy":
        """``allowed`` as ``"127.0.0.1:8123"``, ``"[::1]:8123"`` or a bare address (every port).

        Raises:
            ValueError: an entry is not an IP address with an optional port.
        """
        pairs = set()
        for entry in allowed:
            host, port = split_host_port(entry.strip())
            pairs.add((str(ipaddress.ip_address(host)), port))
        return cls(frozenset(int(p) for p in ports), frozenset(pairs))

    def refusal(self, ip: str, port: int | None) -> str | None:
        """Why a connection to ``ip:port`` is refused (``address_not_global``, ``port_not_allowed``), or None.
        ``port`` None checks the address alone (a resolver does not know the port): an address named in
        ``allowed`` with any port passes then."""
        try:
            addr = ipaddress.ip_address(ip.strip("[]"))
        except ValueError:
            return NOT_GLOBAL
        key = str(reached_address(addr))
        if (key, None) in self.allowed or (key, port) in self.allowed:
            return None
        if port is None and any(a == key for a, _ in self.allowed):
            return None
        if not is_routable(addr):
            return NOT_GLOBAL
        if port is not None and port not in self.ports:
            return PORT_NOT_ALLOWED
        return None

    def routable(self, ip: str) -> bool:
        """:func:`is_routable` of an address string (False for anything that is not an IP address)."""
        try:
            return is_routable(ipaddress.ip_address(ip.strip("[]")))
        except ValueError:
            return False

    def port_refusal(self, port: int) -> str | None:
        """``port_not_allowed`` unless ``port`` is one of ``ports`` or of an ``allowed`` pair (a named test host on
        a loopback port), else None; for a name, before its address is known."""
        if port in self.ports or any(p == port for _, p in self.allowed):
            return None
        return PORT_NOT_ALLOWED


def configured_addresses(name: str, static_hosts: dict[str, str]) -> list[str] | None:
    """The addresses the configuration itself gives a host name: ``localhost``'s (:data:`LOCALHOST_ADDRESSES`) or a
    ``LOOKBENCH_STATIC_HOSTS`` entry's (``static_hosts``, lower-case names; an empty entry: no address), else None
    (the name is DNS's to answer). Only these names, and IP literals, may reach an allowed pair's address that is not
    globally routable (``lookbench_crawlers.resolver``)."""
    name = name.lower()
    if name in static_hosts:
        return [static_hosts[name]] if static_hosts[name] else []
    return list(LOCALHOST_ADDRESSES) if name.rstrip(".") == "localhost" else None


def split_host_port(netloc: str) -> tuple[str, int | None]:
    """``("127.0.0.1", 8123)`` from ``"127.0.0.1:8123"``; ``("::1", 8123)`` from ``"[::1]:8123"``; a bare host has
    port None. Raises ValueError for anything else after the host than ``:<digits>`` (``"[::1]junk"``,
    ``"10.0.0.1:"``, ``"10.0.0.1:x"``): an allowance that does not read exactly must not widen to every port."""
    if netloc.startswith("["):
        host, close, rest = netloc[1:].partition("]")
        if not close:
            raise ValueError(f"{netloc!r}: '[' without ']'")
    elif netloc.count(":") == 1:
        host, _, port = netloc.partition(":")
        rest = ":" + port
    else:
        return netloc, None
    if not rest:
        return host, None
    if not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit()):
        raise ValueError(f"{netloc!r}: after the host only ':<port>' may follow")
    return host, int(rest[1:])


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
