"""Running a script in a fresh interpreter with the network refused (tests/netguard/sitecustomize.py loaded first):
the environment, the guard's self-test the script starts with, and the attempts the guard logged."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUARD = Path(__file__).parent / "netguard"

SELF_TEST = r"""
import socket
# the guard is live: a connection to a documentation address (RFC 5737) is refused before any packet leaves
try:
    socket.create_connection(("192.0.2.1", 9), timeout=1)
    raise SystemExit("netguard is not active")
except OSError as exc:
    assert "netguard" in str(exc), exc
"""


def guarded_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """``(env, log)``: this process's environment without YOLO_/HF_/LOOKBENCH_ settings, the guard first on
    PYTHONPATH, a fresh HOME under ``tmp_path``, and the file the guard logs refused attempts to."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    log = tmp_path / "netguard.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("YOLO_", "HF_", "LOOKBENCH_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(GUARD), str(ROOT)]), NETGUARD_LOG=str(log), HOME=str(home),
               XDG_CONFIG_HOME=str(home / ".config"), HF_HOME=str(home / "hf"))
    return env, log


def outbound_attempts(log: Path) -> list[str]:
    """The targets of the outbound attempts the guard refused (the self-test's own is ``('192.0.2.1', 9)``)."""
    return [json.loads(line)["target"] for line in log.read_text().splitlines()] if log.is_file() else []
