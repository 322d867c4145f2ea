"""Loaded at interpreter start (this folder first on PYTHONPATH): every outbound network attempt -- a connect
to an address outside the loopback range, or a DNS lookup of a name that is not local -- is refused before any
packet leaves and written, one JSON line each, to the file named by $NETGUARD_LOG. It covers Python's socket
module, which urllib, requests, huggingface_hub and ultralytics all go through."""

import ipaddress
import json
import os
import socket

_LOG = os.environ.get("NETGUARD_LOG")
_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "", None}


def _local(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _record(kind: str, target) -> None:
    if _LOG:
        with open(_LOG, "a") as fh:
            fh.write(json.dumps({"kind": kind, "target": repr(target), "pid": os.getpid()}) + "\n")


def _guarded(orig):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
            _record("connect", address)
            raise OSError(101, f"netguard: outbound connection to {address!r} refused")
        return orig(self, address)
    return connect


def _literal(host) -> bool:
    try:
        ipaddress.ip_address(str(host.decode() if isinstance(host, bytes) else host).split("%")[0])
        return True
    except ValueError:
        return False


def getaddrinfo(host, *args, **kwargs):
    if not _local(host) and not _literal(host):  # a literal address needs no lookup; its connect is guarded
        _record("getaddrinfo", host)
        raise socket.gaierror(socket.EAI_NONAME, f"netguard: name lookup of {host!r} refused")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded(_connect)
socket.socket.connect_ex = _guarded(_connect_ex)
socket.getaddrinfo = getaddrinfo
