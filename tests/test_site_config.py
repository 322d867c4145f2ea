"""A site file's values are checked when it is loaded, as a user's build loads it (SiteConfig.from_yaml, load_config,
``lookbench build --config``); the message names the file, the field and the bad value."""

from pathlib import Path

import pytest
import yaml

from lookbench_pipeline.config import ConfigError, SiteConfig, load_config
from lookbench_pipeline.config.base import _read_yaml

ROOT = Path(__file__).resolve().parents[1]


def _site(tmp_path, **fields) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "s", **fields}))
    return p


def _pipeline(tmp_path, site: Path) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"data_dir": str(tmp_path / "data"), "sites": [site.name]}))
    return p


def test_errors_read_without_pydantic_noise(tmp_path):
    """A site file's error names the site file (not the pipeline file that lists it, then ``(top level): Value
    error,``); a model-level check of the pipeline file reads as its message alone."""
    site = _site(tmp_path, max_pages=0)
    with pytest.raises(ConfigError) as err:
        load_config(_pipeline(tmp_path, site))
    assert str(err.value).startswith(f"{site}: max_pages: Input should be greater than or equal to 1"), err.value
    site = _site(tmp_path, kind="replay", pages_dir="gone", sitemap_urls=["{{BASE}}/sitemap.xml"])
    with pytest.raises(ConfigError) as err:
        load_config(_pipeline(tmp_path, site))
    assert str(err.value) == f"{tmp_path / 'c.yaml'}: replay site 's': pages_dir {tmp_path / 'gone'} is not a folder"


def test_a_key_given_twice_is_a_yaml_error(tmp_path):
    """PyYAML keeps the last of two equal keys without a word: ``name:`` twice crawled under the second name."""
    p = tmp_path / "s.yaml"
    p.write_text("name: first\nstart_urls: ['https://shop.example/']\nname: second\n")
    with pytest.raises(ConfigError, match=rf"(?s)^{p}: not valid YAML: .*key 'name' given twice \(first on line 1\)"
                                          rf".*s\.yaml\", line 3, column 1"):
        SiteConfig.from_yaml(p)
    c = tmp_path / "c.yaml"
    c.write_text("data_dir: data\nimages:\n  min_side_px: 40\n  min_side_px: 50\n")
    with pytest.raises(ConfigError, match=r"(?s)c\.yaml: not valid YAML: .*key 'min_side_px' given twice.*line 4"):
        load_config(c)
    c.write_text("data_dir: data\n1: a\n'1': b\n")  # an int and a string key differ
    assert _read_yaml(c) == {"data_dir": "data", 1: "a", "1": "b"}


def test_a_merge_may_override_keys(tmp_path):
    """``<<: *anchor`` brings in keys that the mapping may override: that is no key given twice."""
    p = tmp_path / "m.yaml"
    p.write_text("base: &b {x: 1, y: 2}\nmore: &m {<<: *b, z: 3}\none:\n  <<: *b\n  x: 5\n"
                 "two:\n  <<: [*m, *b]\n  y: 6\n")
    assert _read_yaml(p) == {"base": {"x": 1, "y": 2}, "more": {"x": 1, "y": 2, "z": 3}, "one": {"x": 5, "y": 2},
                             "two": {"x": 1, "y": 6, "z": 3}}


def test_shipped_yaml_has_no_key_twice():
    files = [f for folder in ("configs", "lookbench_pipeline/data", "tests") for pattern in ("*.yaml", "*.yml")
             for f in (ROOT / folder).rglob(pattern)]
    assert len(files) >= 7
    for f in files:
        _read_yaml(f)
