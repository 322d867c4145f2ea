"""Deprecated: moved to :mod:`lookbench_pipeline.demo.shop`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .demo import _moved, shop

_moved("lookbench_pipeline.demo_shop", shop, __name__)
