"""Deprecated: moved to :mod:`lookbench_pipeline.releases.docs`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .deprecation import moved
from .releases import docs

moved("lookbench_pipeline.release_docs", docs, __name__)
