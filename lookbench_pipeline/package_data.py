"""Where the data files shipped inside the package live (``lookbench_pipeline/data``). A bottom module: it imports
nothing of the library, so the settings (:mod:`lookbench_pipeline.config`) and the taxonomy
(:mod:`lookbench_pipeline.taxonomy`) can both name their default files without importing each other."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DATA = Path(__file__).parent / "data"
DEFAULT_TAXONOMY = PACKAGE_DATA / "taxonomy_v2.yaml"
DEMO_SITE = PACKAGE_DATA / "sites" / "demo.yaml"
