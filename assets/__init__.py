"""The Dagster asset graph of LookBench Pipeline: thin wrappers over ``lookbench_pipeline``.

``workspace.yaml`` loads :data:`assets.definitions.defs`.
"""
