"""Deprecated: moved to :mod:`lookbench_pipeline.demo.scripted_openai`; this path works for one release (a
DeprecationWarning, then the moved module itself)."""

from ..demo import _moved, scripted_openai

_moved("lookbench_pipeline.testing.scripted_openai", scripted_openai, __name__)

if __name__ == "__main__":  # python -m lookbench_pipeline.testing.scripted_openai
    scripted_openai.main()
