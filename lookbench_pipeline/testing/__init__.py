"""Test helpers that ship with the library (used by tests/ and benchmarks/): pHash code sets (:mod:`.codes`). The
scripted OpenAI-compatible server moved to :mod:`lookbench_pipeline.demo.scripted_openai`."""
