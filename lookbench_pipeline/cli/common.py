"""What every command shares: the exit codes, the usage error, and the check that a build command runs where the
build stack is installed. The bottom module of the command line: it imports no sibling."""

from __future__ import annotations

import importlib.util

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
"""Exit codes: 0 success; 1 an error, or (``evaluate``) nothing scored or a named model not scored; 2 a
configuration or usage error (a bad option value, a missing install extra, an invalid configuration)."""


class UsageError(ValueError):
    """A command line that cannot be run as given (exit code 2)."""


BUILD_MODULES = {"dagster": "dagster", "scrapy": "scrapy", "extruct": "extruct", "ultralytics": "ultralytics",
                 "torch": "torch"}


def need_build_stack(command: str, modules: tuple[str, ...] = tuple(BUILD_MODULES)) -> None:
    """Raise UsageError naming the extra to install when a build command runs in the consumer install (the base
    ``pip install <checkout>``, no extras: releases, info, pull, evaluate only)."""
    missing = [BUILD_MODULES.get(m, m) for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"`lookbench {command}` builds releases and needs the build stack, which this install "
                         f"lacks ({', '.join(missing)}): pip install 'lookbench-pipeline[build]' (in a checkout: make "
                         "demo / make test install it)")
