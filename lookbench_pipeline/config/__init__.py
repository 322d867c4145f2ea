"""Configuration: one pydantic model for a release build, loaded from a YAML file and the environment.

Precedence (highest first): environment variables ``LOOKBENCH_<FIELD>`` (nested with ``__``, e.g.
``LOOKBENCH_STORE__URL``), the YAML file named by ``LOOKBENCH_CONFIG`` (or passed explicitly), the defaults below.
The defaults are the embedded demo: a shop the project generates and serves on 127.0.0.1, when no file is given at
all; a file without ``sites`` has no site (not the demo's), a build from a file must name its ``sites``
(:func:`require_named_sites`), and the demo's legacy trees are defaults only where a demo site is configured.

Relative paths in a YAML file are resolved against the folder of that file; relative paths from the environment or
defaults against the working directory.

The package, bottom up (each module imports only those above it in this list):

* :mod:`.base`: :class:`ConfigError`, the strict base model, :data:`SUBSET_NAMES`, the name-template fields of
  annotation files, reading a YAML file, :func:`describe_error`;
* :mod:`.sites`: a site file (:class:`SiteConfig`, :class:`LookRules`, :class:`ProductRules`);
* :mod:`.sections`: the data-side sections (store, drops, images, dedup, legacy sources, contamination, negatives,
  evaluate, card, checks); :mod:`.inference`: the sections of the stages that run a model (annotate and its judge,
  aigen, detect);
* :mod:`.model`: :class:`PipelineConfig` (its ``layout``: :class:`lookbench_pipeline.layout.DataLayout`);
* :mod:`.env`: the ``LOOKBENCH_*`` variables; :mod:`.load`: :func:`load_config`, :func:`require_named_sites`.

Every name is importable from ``lookbench_pipeline.config`` as before.
"""

from ..package_data import DEFAULT_TAXONOMY, DEMO_SITE, PACKAGE_DATA  # noqa: F401  (importable from here too)
from .base import SUBSET_NAMES, TEMPLATE_FIELDS, ConfigError, describe_error, template_fields
from .env import ENV_NESTED, ENV_PREFIX, OTHER_ENV, config_env_names, unknown_env, warn_unknown_env
from .inference import (AIGEN_SUBSETS, AigenCheckConfig, AigenConfig, AigenEndpointConfig, AnnotateConfig,
                        DemoDetectorConfig, DetectConfig, DetectorTrainConfig, JudgeConfig, PersonRegionsConfig)
from .load import load_config, require_named_sites
from .model import PipelineConfig
from .sections import (AnnotationFileConfig, Bounds, CardConfig, ChecksConfig, ContaminationConfig, DedupConfig,
                       DropConfig, EvaluateConfig, ImageConfig, LegacySource, NegativesConfig, StoreConfig)
from .sites import LookRules, ProductRules, SiteConfig

__all__ = [
    "AIGEN_SUBSETS", "DEFAULT_TAXONOMY", "DEMO_SITE", "ENV_NESTED", "ENV_PREFIX", "OTHER_ENV", "PACKAGE_DATA",
    "SUBSET_NAMES", "TEMPLATE_FIELDS",
    "AigenCheckConfig", "AigenConfig", "AigenEndpointConfig", "AnnotateConfig", "AnnotationFileConfig", "Bounds",
    "CardConfig", "ChecksConfig", "ConfigError", "ContaminationConfig", "DedupConfig", "DemoDetectorConfig",
    "DetectConfig", "DetectorTrainConfig", "DropConfig", "EvaluateConfig", "ImageConfig", "JudgeConfig",
    "LegacySource", "LookRules", "NegativesConfig", "PersonRegionsConfig", "PipelineConfig", "ProductRules",
    "SiteConfig", "StoreConfig",
    "config_env_names", "describe_error", "load_config", "require_named_sites", "template_fields", "unknown_env",
    "warn_unknown_env",
]
