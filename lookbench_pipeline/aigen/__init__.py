"""The AI-generated subsets, AIGen-Studio and AIGen-StreetLook: generation requests for chosen real items, the
backends that fulfil them, and the check that a generated image still shows its reference product.

Flow (each step a table of :mod:`lookbench_pipeline.schemas`; docs/AIGEN.md has the picture)::

    annotations + gallery images ──► generation_requests ──► generated_images ──► image intake (images.take_in)
                                         (prompt, seed,       (endpoint or job     ──► generated_checks ──► release
                                          reference)           file; provenance)      (dedup, contamination,
                                                                                       reference check)

* **Requests** (:func:`make_requests`): items with labels (annotations ``labelled``) and an accepted gallery image
  (a crawled product's first accepted image, or a drop image with role ``gallery``), first seen inside the release
  window, optionally of configured categories, are ranked per subset by ``sha1(seed, subset, item)`` and picked
  round-robin over categories (so categories are balanced and adding items changes few picks). A request carries a
  prompt built from the item's category and attribute labels (:func:`build_prompt`), the gallery image as the
  reference, and a seed derived from the configured seed, subset and item. Its id hashes all of these, so the
  same request is the same id in every run.
* **Backends** (:func:`generate`): ``endpoint`` sends each request to an OpenAI-Images-compatible server with the
  ``openai`` client (``images.edit`` with the reference, or ``images.generate``), answer ``b64_json``; HTTP 408,
  409, 429 and 5xx, timeouts, connection errors and malformed answers are retried with exponential backoff (or
  the server's ``Retry-After``) up to ``max_attempts``, then recorded as ``failed`` with the reason. ``job_file``
  writes the requests as JSONL (with the reference images) for an external generator and ingests its results from
  a drop folder: ``<request_id>.<png|jpg|webp>`` plus a sidecar ``<request_id>.json`` with at least ``model`` and
  ``version``; requests without a result stay ``pending``. With no endpoint configured the run is refused, unless
  the configuration is the demo (a ``demo`` site): then the stage passes in the scripted endpoint of
  :mod:`lookbench_pipeline.demo.aigen_server`, which is started on 127.0.0.1 for the run and says so.
* **Provenance**: every result is kept under ``<data_dir>/aigen/results/<request_id>.json`` (file, sha256,
  generator model and version, seed, ``first_seen_at`` = when the pipeline first received it) and, with its image,
  in the object store (``records/aigen/``, :mod:`lookbench_pipeline.records`). A later run reuses it (nothing is
  generated twice; ``first_seen_at`` is kept), restoring it from the store when the local copy is gone (a
  backfill into an empty ``data_dir``).
* **Check** (:func:`check_generated`): accepted by the same image intake, not a duplicate of a real image
  (sha256, or pHash within the dedup threshold confirmed by colour), not in the contamination index, and showing
  its reference product (:mod:`.reference_check`: attribute agreement and embedding similarity above the
  configured thresholds); otherwise rejected with the reason. ``in = accepted + rejected`` at every step.

Modules, each importing only those above it: :mod:`.requests` and :mod:`.reference_check` (the bottom, no sibling),
:mod:`.backends` (endpoint and job-file backends, no sibling), :mod:`.generate` (fulfilling the requests,
provenance), :mod:`.check` (the check), :mod:`.handoff` (what the other stages take: intake references, detection
inputs, the manifest summary). This package re-exports their public names: ``from lookbench_pipeline.aigen import
X`` keeps working. It never imports :mod:`lookbench_pipeline.pipeline` or :mod:`lookbench_pipeline.demo`: the stage
passes the scripted endpoint (:class:`ScriptedEndpoint`) and the image annotator's factory
(:attr:`CheckContext.vlm_annotator`) in.
"""

from .backends import (IMAGE_SUFFIXES, REFERENCE_MAX_SIDE, RETRY_STATUSES, EndpointBackend, Outcome, ScriptedEndpoint,
                       endpoint_for, ingest_drop, reference_png, write_jobs)
from .check import CheckContext, PixelLabeller, VlmLabeller, check_generated, labeller_for
from .generate import ResultCache, generate
from .handoff import detection_inputs, image_refs_of, manifest_summary, regions_from_detections
from .reference_check import (ANNOTATOR_PIXEL_COLOUR, COLOUR_ANCHORS, COLOUR_FAMILY, PixelColourAnnotator,
                              compare_attributes, locate, prepare_reference)
from .requests import (KIND_OF_SUBSET, PROMPT_VERSION, Reference, build_prompt, describe_item, make_requests,
                       reference_candidates, request_seed)

__all__ = [
    "ANNOTATOR_PIXEL_COLOUR", "COLOUR_ANCHORS", "COLOUR_FAMILY", "IMAGE_SUFFIXES", "KIND_OF_SUBSET", "PROMPT_VERSION",
    "REFERENCE_MAX_SIDE", "RETRY_STATUSES", "CheckContext", "EndpointBackend", "Outcome", "PixelColourAnnotator",
    "PixelLabeller", "Reference", "ResultCache", "ScriptedEndpoint", "VlmLabeller", "build_prompt",
    "check_generated", "compare_attributes", "describe_item", "detection_inputs", "endpoint_for", "generate",
    "image_refs_of", "ingest_drop", "labeller_for", "locate", "make_requests", "manifest_summary", "prepare_reference",
    "reference_candidates", "reference_png", "regions_from_detections", "request_seed", "write_jobs",
]
