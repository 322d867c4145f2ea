"""Deprecated: moved to :mod:`lookbench_pipeline.aigen.reference_check`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from .aigen import reference_check
from .deprecation import moved

moved("lookbench_pipeline.aigen_check", reference_check, __name__)
