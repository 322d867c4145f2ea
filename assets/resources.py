"""Resources: the pipeline configuration, and one resource per external system it talks to.

* ``lookbench`` (:class:`LookbenchConfig`): the YAML file (or ``$LOOKBENCH_CONFIG``, or the embedded demo
  defaults), parsed once per run and process (``setup_for_execution``, which Dagster calls once per run in each
  process: once for the in-process executor, once per step process otherwise); every asset's ``load()`` and
  ``store()`` in that run use the parsed ``PipelineConfig``, so a step does not re-read a file that might change
  under it, and the settings are validated once.
* ``object_store`` (:class:`ObjectStoreResource`), ``vllm`` (:class:`VllmEndpointResource`: the annotator and
  its judge) and ``image_endpoint`` (:class:`ImageEndpointResource`: the AI-generation image endpoint): typed
  settings of the external systems, shown in the Launchpad (Dagster UI -> a job -> Launchpad -> resources), so a
  run can point at another bucket or model server without editing the YAML. Unset (null) fields keep the YAML's
  value (or its ``LOOKBENCH_*`` environment variable's); a set field wins over both, as the most specific setting
  of one run. ``lookbench`` applies them, so the library sees one ``PipelineConfig``. They are its fields as
  resource dependencies: ``build_defs`` passes the top-level keys' resources configured at launch, which Dagster
  binds to those keys, so a run's config of ``object_store`` (not a copy inside ``lookbench``) is the one applied.
"""


import os
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, InitResourceContext, ResourceDependency
from pydantic import Field, PrivateAttr

from lookbench_pipeline.config import ConfigError, PipelineConfig, describe_error, load_config, require_named_sites
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.store import ObjectStore

from .step_process import die_with_run_worker


CONFIG_TAG = "lookbench/config"
STORE_TAG = "lookbench/store"


def store_tag(url: str) -> str:
    """What the ``lookbench/store`` run tag says of a store URL: the URL with any user and password left out
    (credentials never go into run tags)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.netloc and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def retag_store(context: InitResourceContext | None, store_url: str) -> None:
    """Make the run's ``lookbench/store`` tag name the store the run really uses: a Launchpad setting of
    ``object_store`` overrides the configuration's store, whose URL the tag was given when the run was created
    (``definitions.origin_tags``), so filtering the Runs page by the store finds the runs that published there.
    A run without the tag (a test's ``materialize``) is left as it is."""
    run = getattr(context, "run", None) if context is not None else None
    if run is None or not run.tags or STORE_TAG not in run.tags:
        return
    want = store_tag(store_url)
    if run.tags[STORE_TAG] != want:
        context.instance.add_run_tags(run.run_id, {STORE_TAG: want})


def config_origin(config_path: str | None) -> str:
    """What the ``lookbench/config`` run tag says of a configuration: the file's absolute path (``config_path``,
    else ``$LOOKBENCH_CONFIG``), or ``built-in demo`` for the embedded defaults."""
    config_path = config_path or os.environ.get("LOOKBENCH_CONFIG")
    return str(Path(config_path).resolve()) if config_path else "built-in demo"


def require_location_config(config_path: str | None, context: InitResourceContext | None, setting: str) -> None:
    """Refuse, at the start of a run, a configuration other than the one its code location loaded.

    A code location is bound to one configuration when its definitions load (``definitions.build_defs``): the
    run's ``lookbench/config`` tag, its data folder and store tags, and the site partitions its schedules and
    sensor request. A run given another ``config_path`` in the Launchpad would crawl with one configuration and
    be recorded as the other's, its stored values split between them. A run without the tag (a test's
    ``materialize``) is not checked.

    Raises ConfigError naming ``setting``, the run's configuration and how to build from the other one."""
    run = getattr(context, "run", None) if context is not None else None
    want = run.tags.get(CONFIG_TAG) if run is not None and run.tags else None
    if want is None or config_origin(config_path) == want:
        return
    raise ConfigError(
        f"{setting} {config_path!r} is not this code location's configuration ({want}): a run builds from the "
        "configuration its code location loaded (its IO manager's data folder, its run tags and site partitions "
        "are bound to it), so a run cannot switch to another one. Leave it unset, or build from that "
        f"configuration in its own code location: LOOKBENCH_CONFIG={config_path} dagster dev -w workspace.yaml "
        f"(or lookbench build --config {config_path})")


def _override(cfg: PipelineConfig, section: str, values: dict[str, Any], path: tuple[str, ...] = ()) -> PipelineConfig:
    """``cfg`` with the set ``values`` merged into its sub-model ``section`` (then ``path`` inside it), validated
    by that sub-model's class. Raises ConfigError naming the resource field when a value is invalid."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return cfg
    parents = [getattr(cfg, section)]
    for p in path:
        parents.append(getattr(parents[-1], p))
    model = parents[-1]
    try:
        new = type(model).model_validate({**model.model_dump(), **values})
    except Exception as exc:  # pydantic.ValidationError
        raise ConfigError(f"resource settings {section}{''.join('.' + p for p in path)} {values}: "
                          f"{describe_error(exc, type(model))}") from exc
    for parent, name in zip(reversed(parents[:-1]), reversed(path)):
        new = parent.model_copy(update={name: new})
    return cfg.model_copy(update={section: new})


class ObjectStoreResource(ConfigurableResource):
    """The object store: releases, originals, derived crops, crawl archives (WARC), rebuild records."""

    url: str | None = Field(default=None, description="A folder or s3://bucket/prefix (null: the YAML's store.url, "
                                                      "default <data_dir>/store).")
    endpoint_url: str | None = Field(default=None, description="An S3-compatible endpoint, e.g. http://minio:9000.")
    region: str | None = Field(default=None, description="The S3 region (null: the YAML's, default us-east-1).")

    def apply(self, cfg: PipelineConfig) -> PipelineConfig:
        return _override(cfg, "store", {"url": self.url, "endpoint_url": self.endpoint_url, "region": self.region})


class VllmEndpointResource(ConfigurableResource):
    """The vision-language model server (vLLM's OpenAI-compatible API) that annotates attributes, and its judge."""

    base_url: str | None = Field(default=None, description="The API base, e.g. http://gpu-host:8000/v1 (null: the "
                                                           "YAML's annotate.endpoint; none there: catalogue text).")
    model: str | None = Field(default=None, description="The served model name (null: the YAML's annotate.model).")
    api_key_env: str | None = Field(default=None, description="The NAME of the environment variable with the key.")
    judge_base_url: str | None = Field(default=None, description="The judge's API base (null: the annotator's).")
    judge_model: str | None = Field(default=None, description="The judge's model (null: the annotator's).")

    def apply(self, cfg: PipelineConfig) -> PipelineConfig:
        cfg = _override(cfg, "annotate", {"endpoint": self.base_url, "model": self.model,
                                          "api_key_env": self.api_key_env})
        return _override(cfg, "annotate", {"endpoint": self.judge_base_url, "model": self.judge_model}, ("judge",))


class ImageEndpointResource(ConfigurableResource):
    """The image-generation endpoint (OpenAI Images API) that draws the AI-generated subsets."""

    base_url: str | None = Field(default=None, description="The API base, e.g. http://gpu-host:8000/v1 (null: the "
                                                           "YAML's aigen.endpoint.base_url).")
    model: str | None = Field(default=None, description="The model name (null: the YAML's).")
    model_version: str | None = Field(default=None, description="Checkpoint / revision the images are recorded "
                                                                "as drawn by; required with base_url.")
    api_key_env: str | None = Field(default=None, description="The NAME of the environment variable with the key.")

    def apply(self, cfg: PipelineConfig) -> PipelineConfig:
        return _override(cfg, "aigen", {"base_url": self.base_url, "model": self.model,
                                        "model_version": self.model_version, "api_key_env": self.api_key_env},
                         ("endpoint",))


class LookbenchConfig(ConfigurableResource):
    """Where the pipeline's configuration comes from: a YAML file (``config_path``), else ``$LOOKBENCH_CONFIG``,
    else the embedded demo defaults, with the external systems' resource settings applied. Environment variables
    ``LOOKBENCH_*`` override the file."""

    config_path: str | None = None
    reuse_unchanged: bool = Field(default=True, description="Reuse the stored value of an asset whose inputs, code "
                                  "and configuration did not change since it was last materialized (assets/reuse.py); "
                                  "false computes every asset, the week's finished crawl crawled again (lookbench build "
                                  "--force).")
    # resource dependencies (Dagster binds a run's config of the top-level key); None: the YAML's settings as they are
    object_store: ResourceDependency[ObjectStoreResource] = None
    vllm: ResourceDependency[VllmEndpointResource] = None
    image_endpoint: ResourceDependency[ImageEndpointResource] = None
    _cfg: PipelineConfig | None = PrivateAttr(default=None)
    _store: ObjectStore | None = PrivateAttr(default=None)

    def _parse(self) -> PipelineConfig:
        cfg = load_config(self.config_path)
        require_named_sites(cfg, self.config_path or os.environ.get("LOOKBENCH_CONFIG"))  # never the demo by default
        for resource in (self.object_store, self.vllm, self.image_endpoint):
            if resource is not None:
                cfg = resource.apply(cfg)
        return cfg

    def setup_for_execution(self, context: InitResourceContext) -> None:
        die_with_run_worker(context)  # a step process of the multiprocess executor: no orphan after kill -9
        require_location_config(self.config_path, context, "lookbench.config_path")
        self._cfg = self._parse()
        self._store = None
        retag_store(context, self._cfg.store_url)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        self._cfg = self._store = None

    def load(self) -> PipelineConfig:
        """The run's configuration, parsed at the run's start (outside a run, e.g. a sensor or a direct call:
        parsed on each call).

        Raises ConfigError: the file, the environment or a resource setting is not a valid configuration."""
        return self._cfg if self._cfg is not None else self._parse()

    def store(self) -> ObjectStore:
        """The object store of the run's configuration (one client per run and process)."""
        if self._cfg is None:
            return store_of(self.load())
        if self._store is None:
            self._store = store_of(self._cfg)
        return self._store
