"""LookBench Pipeline: the library. It knows nothing of Dagster (see ``assets/`` for the asset graph).

Modules: ``schemas`` (every table's pyarrow schema), ``config`` (settings), ``store`` (object store), ``extract``
(structured data), ``crawl`` (running the Scrapy spider, first-seen state), ``drops`` (image drop folders),
``images`` (intake), ``dedup``, ``taxonomy`` and ``annotate`` (labels), ``negatives`` (soft-negative distractors
from Fashion200K), ``releases`` (building and publishing a release; ``releases.reader`` reads a published one),
``embed`` (retrieval models, embedding cache) and
``search`` (exact top-k) and ``metrics`` and ``evaluate`` (scoring), ``scoring`` (your own model: precomputed
embeddings, a function, the site's ``benchmark.json``), ``pipeline`` (the stages as functions), ``cli``
(``console``: the ``lookbench`` script's light entry point, ``early_interrupt``: its one-line Ctrl-C); ``demo``
(the demo shop, its servers and test doubles: imported by the stages and tests only).

``lookbench_pipeline.score(release_folder, embed_fn)`` scores a model on a pulled release
(:func:`lookbench_pipeline.scoring.score`); importing the package itself loads nothing else.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("score", "site_benchmark"):
        from . import scoring

        return getattr(scoring, name)
    raise AttributeError(f"module 'lookbench_pipeline' has no attribute {name!r}")
