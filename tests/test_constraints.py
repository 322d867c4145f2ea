"""constraints.txt pins what `make demo` / `make test` install (the Makefile's `EXTRAS`), the whole closure.

A fresh clone and CI install every package at the version this file names, so a library released between two
runs cannot change what the tests see (w3lib 2.6.0 once moved a charset alias between two CI runs of one day).
These tests keep the file true as pyproject.toml changes: every requirement of the package and of the Makefile's
extras is pinned, each pin satisfies pyproject's range, nothing the installed environment needs is left to float,
and the Makefile's `.venv` holds the pinned versions. `make lock` rewrites the file. The file is resolved for one
Python version, OS and machine (its header names them, CI's): on another, markers select other packages, so the
checks of the installed closure are skipped there, with that reason.
"""

from __future__ import annotations

import platform
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)", line)
        assert match, f"constraints.txt:{number}: not 'name==version': {line!r}"
        name = canonicalize_name(match[1])
        assert name not in pins, f"constraints.txt:{number}: {name} pinned twice"
        pins[name] = Version(match[2])
    return pins


def _locked_platform() -> tuple[str, str, str]:
    """(Python major.minor, OS, machine) from the header line ``# Python 3.11.7 on Linux x86_64;``."""
    match = re.search(r"^# Python (\d+\.\d+)\.\S+ on (\S+) (\S+);$", (ROOT / "constraints.txt").read_text(), re.M)
    assert match, "constraints.txt: no '# Python X.Y.Z on OS MACHINE;' header line (make lock writes one)"
    return match[1], match[2], match[3]


def _skip_off_the_locked_platform() -> None:
    here = (f"{sys.version_info.major}.{sys.version_info.minor}", platform.system(), platform.machine())
    locked = _locked_platform()
    if here != locked:
        pytest.skip(f"constraints.txt is resolved for Python {locked[0]} on {locked[1]} {locked[2]}; "
                    f"this is Python {here[0]} on {here[1]} {here[2]}")


def _makefile_extras() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^EXTRAS := (\S+)$", text, re.M)
    assert match, "Makefile: no 'EXTRAS := ...' line"
    return match[1].split(",")


def _applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**default_environment(), "extra": extra}) for extra in extras or {""})


def _project_requirements() -> list[tuple[Requirement, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [(Requirement(r), "dependencies") for r in project["dependencies"]]
    for extra in _makefile_extras():
        assert extra in project["optional-dependencies"], f"Makefile EXTRAS names {extra!r}: not in pyproject.toml"
        reqs += [(Requirement(r), f"[{extra}]") for r in project["optional-dependencies"][extra]]
    return reqs


def test_the_makefile_installs_with_the_constraints():
    text = (ROOT / "Makefile").read_text()
    stamp_rule = re.search(r"^\$\(STAMP\): (.*)\n((?:\t.*\n)+)", text, re.M)
    assert stamp_rule, "Makefile: no $(STAMP) rule"
    assert "constraints.txt" in stamp_rule[1].split(), "the install must be redone when constraints.txt changes"
    assert "pip install -q -c constraints.txt --upgrade pip" in stamp_rule[2], "pip itself is installed at its pin"
    assert "-c constraints.txt -e '.[$(EXTRAS)]'" in stamp_rule[2]
    assert "pip" in _pins(), "constraints.txt pins pip (make lock's freeze --all writes it)"


def test_the_image_installs_with_the_constraints():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    copy = re.search(r"^COPY .*\bconstraints\.txt\b", text, re.M)
    install = text.find("pip install --no-cache-dir -c constraints.txt --upgrade pip")
    assert copy and 0 <= copy.start() < install, "constraints.txt is copied, then pip installed at its pin"
    assert re.search(r"pip install --no-cache-dir -c constraints.txt -e '\.\[[a-z,]+\]'", text)


def test_every_requirement_is_pinned_inside_its_range():
    pins = _pins()
    for req, where in _project_requirements():
        if not _applies(req, set()):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"pyproject.toml {where}: {req.name} is not pinned in constraints.txt (run make lock)"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"pyproject.toml {where} asks {req}, constraints.txt pins {name}=={pins[name]} (run make lock)"
        )


def test_the_installed_closure_is_pinned():
    """Walks the installed requirements from this package's own, with the Makefile's extras, through each
    dependency's (with the extras asked of it): every installed package met on the way must be pinned. A package
    whose marker excludes this platform, or which is not installed here, is not followed."""
    _skip_off_the_locked_platform()
    pins = _pins()
    # A requirement is followed when its marker holds for the extras asked of the package that states it (checked
    # before it is queued: an ``extra == "server"`` marker is true only there).
    todo = [(req, set(req.extras)) for req, _ in _project_requirements() if _applies(req, set())]
    seen: set[tuple[str, frozenset[str]]] = set()
    unpinned = []
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        if name not in pins:
            unpinned.append(name)
        for text in dist.requires or []:
            sub = Requirement(text)
            if _applies(sub, extras):
                todo.append((sub, set(sub.extras)))
    assert not unpinned, f"installed but not pinned in constraints.txt (run make lock): {sorted(set(unpinned))}"


def test_the_makefile_venv_holds_the_pinned_versions():
    """In the `.venv` that `make test` installs, every pinned package that is installed is at its pin: a `.venv`
    installed before constraints.txt changed, or by hand, is caught here rather than by a test of its behaviour."""
    _skip_off_the_locked_platform()
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip(f"not the Makefile's environment ({ROOT / '.venv'}): this is {sys.prefix}")
    pins, wrong = _pins(), {}
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        pin = pins.get(name)
        if pin is not None and Version(dist.version) != pin:
            wrong[name] = f"{dist.version} installed, {pin} pinned"
    assert not wrong, (f".venv differs from constraints.txt: {wrong} (`rm {ROOT / '.venv' / '.installed'}` and "
                       "`make test` reinstalls it at the pins; make does so itself when the file is newer)")
