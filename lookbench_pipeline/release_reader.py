"""Deprecated: moved to :mod:`lookbench_pipeline.releases.reader`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .deprecation import moved
from .releases import reader

moved("lookbench_pipeline.release_reader", reader, __name__)
