"""Attribute annotation by a vision-language model (production: Qwen2.5-VL-72B-Instruct served by vLLM) through any
OpenAI-compatible endpoint, and a judge model that verifies every label. docs/ANNOTATION.md is the user's guide.

The pieces:

* :func:`prepare_image` (:mod:`.fit`) fits an image to Qwen2.5-VL's limits before it is sent (see there for the
  formula); :func:`fit_inputs` (:mod:`.fitted`) does it once per image and token budget before a run and keeps the
  bytes to send in the object store, where the annotator reads them (``fitted_store``);
* :class:`VlmAnnotator` (:mod:`.annotator`) asks the model for the category (unless one is given) and for the
  category's attributes, with the category's JSON schema (:meth:`Taxonomy.json_schema`) as the structured-output
  constraint (``response_format={"type": "json_schema", ...}``, vLLM's structured-outputs API; the questions and
  schemas are in :mod:`.prompts`); every answer is validated against the schema with ``jsonschema``; invalid JSON,
  a schema violation, ``finish_reason`` other than ``stop``, HTTP errors, dropped connections and timeouts are
  retried with exponential backoff a bounded number of times (:mod:`.client`), then recorded as a failure with
  its reason — one bad response never ends a run;
* :class:`VlmJudge` asks a judge model to accept or reject each attribute label against the image; rejected
  labels are dropped from the labels Fine matching reads (or re-annotated once, ``on_reject="reannotate"``);
* :class:`ResponseCache` (:mod:`.cache`; SQLite, WAL) keeps every validated answer keyed by (kind, image sha256,
  box, model, prompt version, taxonomy version, and the category / labels asked about), written as soon as it
  arrives: a re-run, or a run resumed after a crash, sends no request whose answer was stored;
* :func:`summarize` and :func:`acceptance_rates` / :func:`acceptance_check` (:mod:`.stats`) count a run and gate a
  release on the judge's acceptance rate.

Requests in flight are bounded (``concurrency``; the server batches them); the Dagster asset that runs this sits
in the ``vllm`` concurrency pool so that two runs do not overload one server.

The modules, bottom first: :mod:`.prompts` and :mod:`.fit` import no sibling; :mod:`.fitted` and :mod:`.cache`
import :mod:`.fit`, :mod:`.client` nothing of the package, :mod:`.annotator` all of them, :mod:`.stats`
:mod:`.prompts`. This package re-exports what the single module ``vlm.py`` offered.
"""

from .annotator import INLINE_PREPARE_BYTES, ImageItem, VlmAnnotator, VlmJudge, VlmLabel
from .cache import FittedCache, ResponseCache, cache_key
from .client import Outcome, Sampling, VlmEndpointError
from .fit import (FIT_METHOD, MAX_ASPECT_RATIO, MAX_IMAGE_TOKENS, MIN_IMAGE_TOKENS, PIXELS_PER_TOKEN_SIDE, SERVER_MAX_PIXELS,
                  ImageRefused, PreparedImage, _jpeg_pixels, image_tokens, prepare_image, qwen_resize_target)
from .fitted import FitCounts, fit_inputs, read_fitted
from .prompts import (ACCEPT, JUDGE_PROMPT_VERSION, NONE_CATEGORY, PROMPT_VERSION, REJECT, SYSTEM_PROMPT, _messages,
                      attributes_prompt, category_prompt, category_schema, judge_prompt, judge_schema,
                      reannotate_prompt, restricted_schema)
from .stats import acceptance_check, acceptance_rates, summarize

__all__ = [
    "ACCEPT", "FIT_METHOD", "INLINE_PREPARE_BYTES", "JUDGE_PROMPT_VERSION", "MAX_ASPECT_RATIO", "MAX_IMAGE_TOKENS", "MIN_IMAGE_TOKENS",
    "NONE_CATEGORY", "PIXELS_PER_TOKEN_SIDE", "PROMPT_VERSION", "REJECT", "SERVER_MAX_PIXELS", "SYSTEM_PROMPT",
    "FitCounts", "FittedCache", "ImageItem", "ImageRefused", "Outcome", "PreparedImage", "ResponseCache", "Sampling",
    "VlmAnnotator", "VlmEndpointError", "VlmJudge", "VlmLabel",
    "acceptance_check", "acceptance_rates", "attributes_prompt", "cache_key", "category_prompt", "category_schema",
    "fit_inputs", "image_tokens", "judge_prompt", "judge_schema", "prepare_image", "qwen_resize_target", "read_fitted",
    "reannotate_prompt", "restricted_schema", "summarize",
    # private, imported by tests/test_vlm.py and benchmarks/vlm_client.py
    "_jpeg_pixels", "_messages",
]
