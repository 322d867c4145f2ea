"""Deprecated: moved to :mod:`lookbench_pipeline.embed.packs`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .deprecation import moved
from .embed import packs

moved("lookbench_pipeline.embcache", packs, __name__)
