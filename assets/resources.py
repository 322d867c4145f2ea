"""Resources: the pipeline configuration (and through it the object store)."""


from dagster import ConfigurableResource

from lookbench_pipeline.config import PipelineConfig, load_config
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.store import ObjectStore


class LookbenchConfig(ConfigurableResource):
    """Where the pipeline's configuration comes from: a YAML file (``config_path``), else ``$LOOKBENCH_CONFIG``,
    else the embedded demo defaults. Environment variables ``LOOKBENCH_*`` override either."""

    config_path: str | None = None

    def load(self) -> PipelineConfig:
        return load_config(self.config_path)

    def store(self) -> ObjectStore:
        return store_of(self.load())
