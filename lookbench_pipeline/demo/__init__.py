"""The demo and its test doubles, kept out of the production modules: the demo shop (:mod:`.shop`, generated pages
and photos), the static server that serves it and replays saved pages (:mod:`.serve`), the scripted image endpoint
(:mod:`.aigen_server`), the scripted OpenAI-compatible chat server (:mod:`.scripted_openai`) and the demo detector
trained on looks the shop draws (:mod:`.detector`).

Only the stages (:mod:`lookbench_pipeline.pipeline`), the few marked places docs/ARCHITECTURE.md ("Import rules")
names, and the tests import this package; the import-linter contracts in pyproject.toml enforce it
(tests/test_architecture.py).
"""

from ..deprecation import moved as _moved  # the old demo paths (demo_shop, serve, ...) use it

__all__ = ["_moved"]
