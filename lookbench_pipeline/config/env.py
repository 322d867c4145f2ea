"""The environment: which ``LOOKBENCH_*`` variables set a configuration field, which are known for other reasons
(:data:`OTHER_ENV`), and a warning for the rest (almost always a typo); which variables a validation error comes
from."""

from __future__ import annotations

import os
import re
from typing import Any

from .base import _model_at
from .model import PipelineConfig


ENV_PREFIX, ENV_NESTED = "LOOKBENCH_", "__"
OTHER_ENV = {
    "LOOKBENCH_CONFIG": "the configuration file",
    "LOOKBENCH_LOG_FORMAT": "text or json log records",
    "LOOKBENCH_EXECUTOR": "the Dagster executor of `lookbench build`",
    "LOOKBENCH_VLLM_URL": "the vLLM server of the integration tests",
    "LOOKBENCH_VLLM_REQUIRED": "fail (not skip) the vLLM tests without a server",
    "LOOKBENCH_VLM_API_KEY": "the annotator's API key (annotate.api_key_env)",
    "LOOKBENCH_UI_SCREENSHOTS": "where the UI test writes screenshots",
    "LOOKBENCH_TEST_DETECTOR_CACHE": "the tests' trained-detector cache",
    "LOOKBENCH_DAGSTER_EPHEMERAL": "1: CLI builds record in no Dagster instance (assets/runner.py; the tests set it)",
    # set by the pipeline for the crawler process it starts (lookbench_pipeline.crawl), never by hand
    "LOOKBENCH_REPLAY_WARC": "", "LOOKBENCH_WARC_PATH": "", "LOOKBENCH_STATS_PATH": "",
    "LOOKBENCH_EGRESS_ALLOW": "", "LOOKBENCH_EGRESS_PORTS": "", "LOOKBENCH_STATIC_HOSTS": "",
}
"""``LOOKBENCH_*`` variables that are not configuration fields (what each is for)."""
_WARNED_ENV: set[str] = set()


def config_env_names(cls: Any = None, prefix: str = ENV_PREFIX, depth: int = 3) -> set[str]:
    """Every environment variable name that sets a configuration field (``LOOKBENCH_IMAGES__MIN_SIDE_PX``…),
    nested models down to ``depth`` levels."""
    cls = cls or PipelineConfig
    out = set()
    for name in cls.model_fields:
        var = f"{prefix}{name}".upper()
        out.add(var)
        sub = _model_at(cls, (name,))
        if sub is not None and depth > 1:
            out |= config_env_names(sub, var + ENV_NESTED, depth - 1)
    return out


def unknown_env(environ: Any = None) -> list[tuple[str, str | None]]:
    """``LOOKBENCH_*`` variables that neither set a configuration field nor are one of :data:`OTHER_ENV` (nor
    a variable an ``api_key_env`` field names), each with the closest known name (difflib) or None. Such a
    variable is ignored by the configuration: almost always a typo (``LOOKBENCH_IMAGES_MIN_SIDE_PX``)."""
    import difflib

    environ = os.environ if environ is None else environ
    known = config_env_names() | set(OTHER_ENV)
    nested = tuple(n + ENV_NESTED for n in config_env_names() if _is_model_var(n))
    suffixes = {k[len(ENV_PREFIX):]: k for k in sorted(known)}
    out = []
    for var in sorted(environ):
        up = var.upper()
        if not up.startswith(ENV_PREFIX) or up in known or up.endswith("_API_KEY"):
            continue  # an api_key_env may name any *_API_KEY variable
        if up.startswith(nested):
            continue  # deeper than config_env_names walks (or a dict key): pydantic itself checks those
        near = difflib.get_close_matches(up[len(ENV_PREFIX):], list(suffixes), n=1, cutoff=0.75)
        out.append((var, suffixes[near[0]] if near else None))
    return out


def _is_model_var(var: str) -> bool:
    parts = tuple(var[len(ENV_PREFIX):].lower().split(ENV_NESTED))
    return _model_at(PipelineConfig, parts) is not None or _is_dict_field(parts)


def _is_dict_field(parts: tuple) -> bool:
    import typing

    cls = _model_at(PipelineConfig, parts[:-1]) if len(parts) > 1 else PipelineConfig
    field = getattr(cls, "model_fields", {}).get(parts[-1]) if cls is not None else None
    return field is not None and typing.get_origin(field.annotation) is dict


def warn_unknown_env() -> None:
    """Log a warning (once per variable and process) for each :func:`unknown_env` variable."""
    import logging

    for var, near in unknown_env():
        if var in _WARNED_ENV:
            continue
        _WARNED_ENV.add(var)
        # the package's logger, as before the split (tests and log filters name lookbench_pipeline.config)
        logging.getLogger(__package__).warning(
            "environment variable %s is not a LookBench setting and is ignored%s (settings: LOOKBENCH_<FIELD>, "
            "nested with __, e.g. LOOKBENCH_STORE__URL; README.md, Configuration)", var,
            f"; did you mean {near}?" if near else "")


def _env_vars_of(exc: Exception) -> list[tuple[str, str]]:
    """The ``LOOKBENCH_*`` environment variables an error of :class:`PipelineConfig` comes from: a variable whose
    path (``LOOKBENCH_IMAGES__MIN_SIDE_PX`` -> images, min_side_px) is a prefix of a failing field's location, or
    the field named by pydantic-settings' "error parsing value for field" message."""
    prefix, sep = "LOOKBENCH_", "__"
    env = {k: v for k, v in os.environ.items() if k.upper().startswith(prefix) and k.upper() != "LOOKBENCH_CONFIG"}
    if not env:
        return []
    paths = {k: tuple(k[len(prefix):].lower().split(sep)) for k in env}
    locs: list[tuple[str, ...]] = []
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            locs = [tuple(str(p).lower() for p in e.get("loc", ())) for e in errors()]
        except Exception:  # not a pydantic ValidationError
            locs = []
    m = re.search(r'error parsing value for field "([^"]+)"', str(exc))
    if m:
        locs.append((m.group(1).lower(),))
    return sorted((k, env[k]) for k, parts in paths.items() if any(loc[:len(parts)] == parts for loc in locs))
