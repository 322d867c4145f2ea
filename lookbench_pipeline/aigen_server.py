"""Deprecated: moved to :mod:`lookbench_pipeline.demo.aigen_server`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .demo import _moved, aigen_server

_moved("lookbench_pipeline.aigen_server", aigen_server, __name__)
