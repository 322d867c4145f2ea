"""constraints.txt pins what `make demo` / `make test` install (the Makefile's `EXTRAS`), the whole closure.

A fresh clone and CI install every package at the version this file names, so a library released between two
runs cannot change what the tests see (w3lib 2.6.0 once moved a charset alias between two CI runs of one day).
These tests keep the file true as pyproject.toml changes: every requirement of the package and of the Makefile's
extras is pinned, each pin satisfies pyproject's range, and nothing the installed environment needs is left to
float. `make lock` rewrites the file.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

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
    assert "-c constraints.txt -e '.[$(EXTRAS)]'" in stamp_rule[2]


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
    pins = _pins()
    todo = [(req, set(req.extras)) for req, _ in _project_requirements()]
    seen: set[tuple[str, frozenset[str]]] = set()
    unpinned = []
    while todo:
        req, extras = todo.pop()
        if not _applies(req, set()):
            continue
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

