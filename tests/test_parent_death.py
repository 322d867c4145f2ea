"""``lookbench_pipeline.parent_death``: a child that asked dies when its parent does (Linux only)."""

import os
import subprocess
import sys
import time

import pytest

from lookbench_pipeline import parent_death

CHILD = ("import os, sys, time; from lookbench_pipeline.parent_death import die_with_parent; die_with_parent(); "
         "print(os.getpid(), flush=True); time.sleep(60)")
# The parent starts the child, passes its pid on, and exits without waiting for it.
PARENT = ("import os, subprocess, sys; c = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
          "stdout=subprocess.PIPE, text=True); print(c.stdout.readline().strip(), flush=True); os._exit(0)")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie no one reaped is dead too
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_child_that_asked_dies_with_its_parent():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", PARENT, CHILD], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 20
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = not _gone(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive, "the child outlived its parent"


def test_refused_off_linux(monkeypatch):
    monkeypatch.setattr(parent_death.sys, "platform", "darwin")
    with pytest.raises(OSError, match="Linux only"):
        parent_death.die_with_parent()
