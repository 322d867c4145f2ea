"""Test helpers that ship with the library (used by tests/ and benchmarks/): a scripted OpenAI-compatible server."""
