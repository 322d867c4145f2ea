"""Loading the pipeline file: :func:`load_config` reads the YAML file, resolves its relative paths against its
folder, applies overrides and the environment, and turns every failure into a :class:`ConfigError` that names the
file, field or variable."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .base import ConfigError, _read_yaml, describe_error
from .env import _env_vars_of, warn_unknown_env
from .inference import BUILTIN_WEIGHTS, weights_name_a_file
from .model import FROM_FILE, PipelineConfig


_PATH_KEYS = ("data_dir", "taxonomy")


def load_config(path: str | Path | None = None, **overrides: Any) -> PipelineConfig:
    """Load the pipeline configuration.

    Args:
        path: a YAML file; ``None`` uses ``$LOOKBENCH_CONFIG`` if set, else the embedded demo defaults (only
            then: a file without ``sites`` has no site, and none of the demo's legacy benchmarks by default).
        overrides: field values that win over the file (not over the environment).

    Raises:
        ConfigError: the file is missing or invalid.
    """
    path = path or os.environ.get("LOOKBENCH_CONFIG")
    data: dict[str, Any] = {}
    try:
        data = _read_and_resolve(path) if path else {}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: malformed configuration ({type(exc).__name__}: {exc}); see README.md") from exc
    data.update(overrides)
    warn_unknown_env()
    from_file = FROM_FILE.set(bool(path))  # a file without `sites` has none, not the demo's (model._default_sites)
    try:
        return PipelineConfig(**data)
    except ConfigError:
        raise
    except Exception as exc:  # pydantic.ValidationError; pydantic_settings.SettingsError (an unparsable variable)
        inner = _site_file_error(exc)
        if inner is not None:  # a site file's own error names that file and its field: not the pipeline file
            raise inner from exc
        env = _env_vars_of(exc)
        where = ", ".join(f"environment variable {k}={v!r}" for k, v in env) if env else (path or "defaults")
        raise ConfigError(f"{where}: {describe_error(exc, PipelineConfig)}") from exc
    finally:
        FROM_FILE.reset(from_file)


def _site_file_error(exc: Exception) -> ConfigError | None:
    """The ConfigError a site file raised while the pipeline file was checked (``PipelineConfig._check_inputs``
    loads every site file; pydantic wraps the error as a model-level value error), or None."""
    errors = getattr(exc, "errors", None)
    try:
        items = errors() if callable(errors) else []
    except Exception:  # not a pydantic ValidationError
        return None
    found = [e.get("ctx", {}).get("error") for e in items]
    return found[0] if len(found) == 1 and isinstance(found[0], ConfigError) else None


def require_named_sites(cfg: PipelineConfig, path: str | Path | None) -> None:
    """A build from a configuration file crawls the sites that file (or ``LOOKBENCH_SITES``) names: ``sites``
    defaults to the embedded demo shop only for the built-in configuration (no file), so that a file which omits
    it never crawls the demo and mixes its drops into the demo's release. ``path``: the file the configuration
    came from (``None``: the built-in one). Raises ConfigError."""
    if path and "sites" not in cfg.model_fields_set:
        raise ConfigError(f"{path}: sites: missing: name the site files to crawl (sites: [sites/shop.yaml]); at "
                          "least one site is needed, because the release job reads the window's weekly crawls. "
                          "A configuration file never falls back to the embedded demo shop (`lookbench demo` "
                          "builds that; see README.md, Configuration)")


def _read_and_resolve(path: str | Path) -> dict[str, Any]:
    """Read a config file and resolve its relative paths against its folder (shape errors surface as
    KeyError / TypeError / AttributeError, turned into ConfigError by the caller)."""
    path = Path(path)
    data = _read_yaml(path)
    base = path.parent.resolve()
    for key in _PATH_KEYS:
        if key in data:
            data[key] = _resolve(base, data[key])
    if isinstance(data.get("sites"), list):
        data["sites"] = [_resolve(base, s) for s in data["sites"]]
    if isinstance(data.get("drops"), list):
        for drop in data["drops"]:
            if "path" not in drop:
                raise KeyError(f"drop {drop.get('name', '?')!r} has no 'path'")
            drop["path"] = _resolve(base, drop["path"])
            if drop.get("items_csv"):
                drop["items_csv"] = _resolve(base, drop["items_csv"])
            for ann in drop.get("annotations") or []:
                for key in ("path", "categories"):
                    if isinstance(ann, dict) and ann.get(key):
                        ann[key] = _resolve(base, ann[key])
    aigen = data.get("aigen") or {}
    if isinstance(aigen, dict):
        for key in ("job_dir", "drop_dir"):
            if aigen.get(key):
                aigen[key] = _resolve(base, aigen[key])
    for section, key in (("contamination", "sources"), ("evaluate", "legacy"), ("negatives", "sources")):
        for src in (data.get(section) or {}).get(key, []):
            src["path"] = _resolve(base, src["path"])
    detect = data.get("detect")
    if isinstance(detect, dict):
        if detect.get("cache_dir"):
            detect["cache_dir"] = _resolve(base, detect["cache_dir"])
        w = detect.get("weights")
        if isinstance(w, str) and w not in BUILTIN_WEIGHTS and \
                ((base / os.path.expandvars(w)).expanduser().exists() or weights_name_a_file(w)):
            detect["weights"] = _resolve(base, w)  # a local file (checked by the model); otherwise a model id
    store = data.get("store") or {}
    if not isinstance(store, dict):
        raise TypeError("store must be a mapping, e.g. store: {url: s3://bucket/prefix}")
    if store.get("url") and "://" not in store["url"]:
        store["url"] = _resolve(base, store["url"])
    return data


def _resolve(base: Path, p: Any) -> Any:
    """``p`` relative to ``base``, as a string; a blank value or one that is no string stays as it is, so that the
    model refuses it by its field name (``data_dir: ''`` must not mean the config's own folder)."""
    if not isinstance(p, (str, Path)) or not os.path.expandvars(str(p)).strip():
        return p
    p = Path(os.path.expandvars(str(p))).expanduser()
    return str(p if p.is_absolute() else (base / p).resolve())
