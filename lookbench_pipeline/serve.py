"""Deprecated: moved to :mod:`lookbench_pipeline.demo.serve`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .demo import _moved, serve

_moved("lookbench_pipeline.serve", serve, __name__)
