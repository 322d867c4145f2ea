"""Deprecated: moved to :mod:`lookbench_pipeline.detect.person_regions`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .deprecation import moved
from .detect import person_regions

moved("lookbench_pipeline.person_regions", person_regions, __name__)
