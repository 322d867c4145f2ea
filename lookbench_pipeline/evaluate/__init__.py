"""Scoring retrieval models on a published release: per subset and overall (query-count weighted), optionally
only on queries first seen after a cutoff, with queries flagged as contamination excluded and counted, and the
same models scored on legacy benchmarks read from their own formats.

Which models: the ones asked for, plus (``registry=True``) every model of the model registry
(``lookbench_pipeline/data/models.yaml`` through :func:`embed.load_registry`). A model that cannot run on this
machine is listed as skipped with the reason (:func:`unavailable_reason`: backend not installed, weights not
available offline, needs CUDA), never silently dropped.

When the release has a ``noise`` gallery (distractors mined from Fashion200K, :mod:`lookbench_pipeline.negatives`),
it is added to every subset's gallery, and two more per-query rates are reported: ``distractor@1`` (the top-1
result is a noise-gallery image) and ``soft_negative@1`` (the top-1 result is a soft negative: a noise-gallery
image of the query's category that differs in at least one attribute both carry). Each score row names the model's
id, revision, input size, embedding size and weights checksum. Formulas: docs/METRICS.md.

Modules (imports one way): :mod:`.availability` (which models can run here), :mod:`.files` (a release's files,
their embeddings and label codes), :mod:`.subset` (scoring one subset), :mod:`.results` (:class:`Evaluation`,
paired tests, the plain-text table) -- none of these imports a sibling -- and :mod:`.run` (:func:`run_evaluation`
and the entry points), which builds on them. Every name is importable from ``lookbench_pipeline.evaluate`` as
before; patch a name where it is looked up (``lookbench_pipeline.evaluate.run.load_embedder``, for instance).
"""

from ..embed import EmbeddingCache
from .availability import (ModelEntry, availability, did_you_mean_model, model_cutoff, registry_entries,
                           unavailable_reason, weight_caches)
from .files import META_COLUMNS, ReleaseFile, embed_file, label_codes
from .results import PAIRED_METRICS, Evaluation, format_table
from .run import DEFAULT_KS, NOISE, evaluate_configured, evaluate_legacy, evaluate_release, run_evaluation
from .subset import contamination_flags, noise_hits, score_subset

__all__ = ["EmbeddingCache", "Evaluation", "ModelEntry", "availability", "evaluate_legacy", "evaluate_release",
           "format_table", "model_cutoff", "noise_hits", "registry_entries", "run_evaluation", "unavailable_reason",
           "weight_caches"]
