"""``make dev`` (README.md) stops with everything it started: the Dagster webserver, the daemon and the code
server. Started the way a script or a service starts it (SIGINT ignored, as a shell does for a background job),
``dagster dev`` used to ignore SIGTERM too (it maps SIGTERM to SIGINT's handler) and outlived ``make``."""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.5)
    return pred()


def _as_a_background_job() -> None:
    """The signals of a command a script starts in the background: SIGINT ignored, SIGTERM as the system's default
    (whatever this test process inherited: an in-process Dagster run maps SIGTERM to SIGINT's handler, which is
    ignored when the test run itself was started in the background)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_make_dev_stops_with_its_webserver_and_daemon_when_make_gets_sigterm(tmp_path):
    home = tmp_path / "dagster-home"  # the test's own instance, not the checkout's
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        make = subprocess.Popen(["make", "dev", f"DEV_PORT={_free_port()}", f"DAGSTER_HOME={home}"], cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_as_a_background_job)
    started: list[psutil.Process] = []
    try:
        assert _wait(lambda: "Serving dagster-webserver" in log.read_text(errors="replace"), 180), \
            log.read_text(errors="replace")[-3000:]
        started = psutil.Process(make.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in started)
        assert "dagster_webserver" in names and "dagster._daemon" in names, names
        make.send_signal(signal.SIGTERM)
        make.wait(timeout=60)
        assert _wait(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in started), 60), \
            [" ".join(p.cmdline()) for p in started if p.is_running()]
        assert "Dagster services shut down" in log.read_text(errors="replace")
    finally:  # only what make started (its own session): never the other servers of this test run
        for p in started:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            os.killpg(make.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        make.wait(timeout=30)
