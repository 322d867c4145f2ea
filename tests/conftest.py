"""Shared fixtures. Real inputs are read from ../shared/realdata (never copied into the repository)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Tests use ephemeral Dagster instances: `make` exports DAGSTER_HOME for the demo and the UI, and a test's build
# must not register partitions or runs in the developer's instance.
os.environ.pop("DAGSTER_HOME", None)
os.environ["LOOKBENCH_DAGSTER_EPHEMERAL"] = "1"  # and CLI runs, which otherwise record in the checkout's instance
REALDATA = ROOT.parent / "shared" / "realdata"
# The Scrapy project is importable as `scrapy crawl` runs it from crawlers/ (`lookbench_crawlers`); one place for every
# test module, whichever is collected first.
if str(ROOT / "crawlers") not in sys.path:
    sys.path.insert(0, str(ROOT / "crawlers"))

# One demo detector per test session (trained once, about a minute on a CPU), shared by every build the tests run,
# subprocesses included; LOOKBENCH_TEST_DETECTOR_CACHE keeps it across sessions (the cache is keyed by the training
# data's checksum and the training arguments, so a stale one is never used).
_OWN_DETECTOR_CACHE = "LOOKBENCH_DETECT__CACHE_DIR" not in os.environ and not os.environ.get("LOOKBENCH_TEST_DETECTOR_CACHE")
if _OWN_DETECTOR_CACHE:
    import tempfile

    os.environ["LOOKBENCH_DETECT__CACHE_DIR"] = tempfile.mkdtemp(prefix="lookbench-test-detector-")
else:
    os.environ.setdefault("LOOKBENCH_DETECT__CACHE_DIR", os.environ.get("LOOKBENCH_TEST_DETECTOR_CACHE", ""))


def pytest_configure(config):
    """After a crash of the test process, `.ci/run` resumes the suite where it died (tests/crash_resume.py)."""
    import crash_resume

    crash_resume.register(config)


def pytest_sessionfinish(session, exitstatus):
    """The session's own detector cache goes with it (a kept one, LOOKBENCH_TEST_DETECTOR_CACHE, stays)."""
    if _OWN_DETECTOR_CACHE:
        import shutil

        shutil.rmtree(os.environ["LOOKBENCH_DETECT__CACHE_DIR"], ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "realdata" in item.fixturenames and not REALDATA.is_dir():
            item.add_marker(pytest.mark.skip(reason=f"{REALDATA} not present"))


@pytest.fixture(scope="session")
def realdata() -> Path:
    return REALDATA


@pytest.fixture
def demo_config(tmp_path: Path) -> Path:
    """A pipeline config for the demo shop (small) with data and store under tmp_path."""
    site = yaml.safe_load((ROOT / "lookbench_pipeline/data/sites/demo.yaml").read_text())
    site.update(demo_products=20, demo_looks=5)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    cfg = {"data_dir": "data", "store": {"url": "store"}, "sites": ["demo.yaml"]}
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "pipeline.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible server (moto's server mode) on 127.0.0.1; yields its endpoint URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("moto server did not start")
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def s3_env(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="session")
def vllm_url() -> str:
    """Base URL (``http://127.0.0.1:PORT``, without ``/v1``) of a real vLLM server serving the tiny test model.

    Taken from ``$LOOKBENCH_VLLM_URL`` (`.ci/run` starts a server and sets it; developers: `make vllm-server`,
    docs/VLLM_TESTING.md). Unset: the test is skipped, unless ``$LOOKBENCH_VLLM_REQUIRED=1`` (CI), which fails
    it. Set but the server's /health does not answer 200: the test fails.
    """
    import urllib.error
    import urllib.request

    url = os.environ.get("LOOKBENCH_VLLM_URL", "").rstrip("/")
    if not url:
        if os.environ.get("LOOKBENCH_VLLM_REQUIRED") == "1":
            pytest.fail("LOOKBENCH_VLLM_REQUIRED=1 but LOOKBENCH_VLLM_URL is not set")
        pytest.skip("no vLLM server: set LOOKBENCH_VLLM_URL (make vllm-server; .ci/run starts one)")
    url = url.removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=10) as r:
            ok = r.status == 200
    except (urllib.error.URLError, OSError) as e:
        pytest.fail(f"vLLM server at {url} not reachable: {e}")
    if not ok:
        pytest.fail(f"vLLM server at {url}: /health answered {r.status}")
    return url


@pytest.fixture(scope="session", autouse=True)
def _detector_cache_cleanup():
    yield
    if _OWN_DETECTOR_CACHE:
        import shutil

        shutil.rmtree(os.environ["LOOKBENCH_DETECT__CACHE_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def demo_detector():
    """The demo detector (weights path, training report), trained once per session into the shared cache: the
    same one every demo build of the session uses."""
    from lookbench_pipeline.config import DemoDetectorConfig
    from lookbench_pipeline.demo.detector import demo_detector as train_demo

    d = DemoDetectorConfig()
    weights, report, _ = train_demo(Path(os.environ["LOOKBENCH_DETECT__CACHE_DIR"]), d.scenes, d.seed,
                                    d.train.model_dump())
    return weights, report


@pytest.fixture
def store(tmp_path):
    """A folder store with two published releases, v20260301 (items 0-3) and v20260701 (items 2-7): the consumer
    tests' (``test_store_hostile``, ``test_consumer_errors``)."""
    from release_factory import make_release

    from lookbench_pipeline.releases.publish import publish
    from lookbench_pipeline.store import LocalStore

    s = LocalStore(tmp_path / "store")
    publish(make_release("v20260301", range(0, 4)), s, {})
    publish(make_release("v20260701", range(2, 8)), s, {})
    return s
