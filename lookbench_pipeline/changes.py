"""Deprecated: moved to :mod:`lookbench_pipeline.releases.changes`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .deprecation import moved
from .releases import changes

moved("lookbench_pipeline.changes", changes, __name__)
