"""What the assets say in Dagster's event log and materialisations: the level of their messages and the
metadata docs/ARCHITECTURE.md lists."""

import logging

import pyarrow as pa
from dagster import build_asset_context


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_the_image_endpoint_used_is_information_not_a_warning(demo_config, monkeypatch):
    """``generated images: endpoint … model …`` says which server drew the images; a warning would send people
    looking for a problem (the UI marks warnings)."""
    import assets.aigen as aigen
    from assets.resources import LookbenchConfig

    monkeypatch.setattr(aigen, "stage_aigen_generate", lambda *a, **k: (
        pa.table({"request_id": ["r1"]}), {"endpoint": "endpoint http://gpu:9000/v1 model m", "requests": 1}))
    context = build_asset_context(partition_key="2026-07-01")
    seen = _Records()
    context.log.addHandler(seen)
    aigen.generated_images(context=context, lookbench=LookbenchConfig(config_path=str(demo_config)),
                           generation_requests=pa.table({"request_id": ["r1"]}))
    [line] = [r for r in seen.records if "generated images: endpoint http" in r.getMessage()]
    assert line.levelno == logging.INFO
    assert not [r for r in seen.records if r.levelno >= logging.WARNING]
