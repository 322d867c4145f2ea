"""Deprecated: moved to :mod:`lookbench_pipeline.releases.card`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .deprecation import moved
from .releases import card

moved("lookbench_pipeline.card", card, __name__)
