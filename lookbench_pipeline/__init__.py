"""LookBench Pipeline: the library. It knows nothing of Dagster (see ``assets/`` for the asset graph).

Modules: ``schemas`` (every table's pyarrow schema), ``config`` (settings), ``store`` (object store), ``extract``
(structured data), ``crawl`` (running the Scrapy spider, first-seen state), ``drops`` (image drop folders),
``images`` (intake), ``dedup``, ``taxonomy`` and ``annotate`` (labels), ``negatives`` (soft-negative distractors
from Fashion200K), ``release`` (files, manifest, publishing), ``embed`` (retrieval models, embedding cache) and
``search`` (exact top-k) and ``metrics`` and ``evaluate`` (scoring), ``pipeline`` (the stages as functions),
``cli``.
"""

__version__ = "0.1.0"
