"""Deprecated: moved to :mod:`lookbench_pipeline.releases.publishing`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .deprecation import moved
from .releases import publishing

moved("lookbench_pipeline.publishing", publishing, __name__)
