"""Ctrl-C while the ``lookbench`` console script is still importing NumPy / PyArrow (its first half second) is
one line and exit 130, as it is once a command runs: the entry point (pyproject.toml's [project.scripts]) is a
light module that sets that up before the heavy imports."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _entry_point() -> tuple[str, str]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["lookbench"]
    module, _, fn = spec.partition(":")
    return module, fn


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "crawlers")])}


# What the installed console script runs (pip's generated `lookbench`), with SIGINT sent to the process at the
# moment NumPy starts to import: as a Ctrl-C pressed while the command line loads.
_SCRIPT = """
import os, signal, sys

class CtrlCOnNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlCOnNumpy())
sys.argv = ["lookbench", "releases", "--store", sys.argv[1]]
from {module} import {fn}
sys.exit({fn}())
"""


def test_ctrl_c_while_the_console_script_loads_is_one_line_and_exit_130(tmp_path):
    module, fn = _entry_point()
    (tmp_path / "store").mkdir()
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.format(module=module, fn=fn), str(tmp_path / "store")],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.strip() == "interrupted" and proc.stdout == ""


def test_the_console_script_runs_a_command_and_its_entry_module_is_light(tmp_path):
    """The entry module itself loads none of the heavy libraries (so the window without the one-line Ctrl-C is
    the interpreter's start only), and the command runs as before through it. It may import
    ``lookbench_pipeline.early_interrupt``, the Ctrl-C handling it shares with ``python -m lookbench_pipeline.cli``
    (the standard library only: anything heavy it loaded would be listed here too)."""
    module, fn = _entry_point()
    (tmp_path / "store").mkdir()
    code = (f"import sys; import {module}; heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'pyarrow', 'pydantic', 'requests', 'lookbench_pipeline') and m not in ('lookbench_pipeline', "
            f"'lookbench_pipeline.early_interrupt', {module!r})); print(heavy); "
            "sys.argv = ['lookbench', 'releases', '--store', sys.argv[1]]; "
            f"sys.exit({module}.{fn}())")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[0] == "[]", proc.stdout + proc.stderr
    assert proc.returncode == 0 and "no releases in" in proc.stdout, proc.stdout + proc.stderr


def test_ctrl_c_while_python_m_loads_the_command_line_is_one_line_and_exit_130(tmp_path):
    """``python -m lookbench_pipeline.cli`` goes through the same light entry point: Python imports the package
    before its ``__main__``, and a Ctrl-C while that import loads NumPy is one line and exit 130 (the same hook as
    above, installed through ``sitecustomize`` since ``-m`` runs no code of ours first)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SCRIPT.split("sys.argv =")[0])
    (tmp_path / "store").mkdir()
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(hook), env["PYTHONPATH"]])
    command = [sys.executable, "-m", "lookbench_pipeline.cli", "releases", "--store", str(tmp_path / "store")]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.strip() == "interrupted" and proc.stdout == ""
    # without the Ctrl-C, the command runs, and an import of the package from a program keeps KeyboardInterrupt
    proc = subprocess.run(command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "no releases in" in proc.stdout, proc.stdout + proc.stderr
    code = _SCRIPT.split("sys.argv =")[0] + "\ntry:\n    import lookbench_pipeline.cli\nexcept KeyboardInterrupt:\n" \
        "    print('KeyboardInterrupt')\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "KeyboardInterrupt", proc.stdout + proc.stderr[-3000:]
