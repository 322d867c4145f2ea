"""The researcher's path from a folder outside the checkout: list and pull a release from any store with
`--store` (an S3 bucket read anonymously, a static http(s) mirror), no pipeline configuration at all; and the
same path in a fresh virtual environment with only the base install (`pip install <checkout>`, no extras)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from release_factory import export_embeddings, make_release, with_noise

from lookbench_pipeline.demo import serve
from lookbench_pipeline.evaluate import run_evaluation
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import LocalStore, open_store

V1, V2 = "v20260301", "v20260701"
ROOT = Path(__file__).resolve().parents[1]
BUILD_STACK = ("dagster", "scrapy", "scrapy_playwright", "extruct", "chompjs", "torch", "torchvision", "ultralytics",
               "openai", "playwright", "matplotlib", "scipy")


def _env(home: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LOOKBENCH_", "PYTHON"))}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_EC2_METADATA_DISABLED="true")
    if home is not None:
        env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    return env


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)


def _public_bucket(s3_server: str, releases: list, bucket: str = "lookbench-public") -> object:
    """A public bucket, as a release is published: anyone may list and read, nobody anonymous may write."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_server)
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject"], "Resource": f"arn:aws:s3:::{bucket}/*"},
        {"Effect": "Allow", "Principal": "*", "Action": ["s3:ListBucket"], "Resource": f"arn:aws:s3:::{bucket}"}]}))
    store = open_store(f"s3://{bucket}/bench", endpoint_url=s3_server)
    for rel in releases:
        publish(rel, store, {})
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):  # moto checks anonymous reads against object ACLs
            s3.put_object_acl(Bucket=bucket, Key=obj["Key"], ACL="public-read")
    return store


def test_pull_latest_from_a_public_bucket_anonymously(tmp_path, s3_server, s3_env):
    store = _public_bucket(s3_server, [make_release(V1, range(0, 4)), make_release(V2, range(2, 8))])
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    url = "s3://lookbench-public/bench"
    proc = _cli(["releases", "--store", url, "--endpoint-url", s3_server, "--anon"], outside)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [V1, V2]
    proc = _cli(["pull", "latest", "--store", url, "--endpoint-url", s3_server, "--anon", "--dest", "rel",
                 "--quiet"], outside)
    assert proc.returncode == 0, proc.stderr
    folder = outside / "rel" / V2
    assert (folder / "manifest.json").read_bytes() == store.get_bytes(f"releases/{V2}/manifest.json")
    assert (folder / "real_studio_flat/query.parquet").is_file()
    proc = _cli(["info", "latest", "--store", url, "--endpoint-url", s3_server, "--anon"], outside)
    assert proc.returncode == 0 and V2 in proc.stdout and "query" in proc.stdout, proc.stderr
    assert not (outside / "data").exists(), "a consumer command made no pipeline folders"


def test_pull_from_a_static_http_mirror(tmp_path):
    store = LocalStore(tmp_path / "mirror")
    publish(make_release(V1, range(0, 4)), store, {})
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with serve.serving(serve.static_resolver(tmp_path / "mirror")) as srv:
        proc = _cli(["pull", "latest", "--store", srv.base_url, "--dest", "rel", "--quiet"], outside)
        assert proc.returncode == 0, proc.stderr
        listed = _cli(["releases", "--store", srv.base_url], outside)
    assert (outside / "rel" / V1 / "manifest.json").read_bytes() == store.get_bytes(f"releases/{V1}/manifest.json")
    assert listed.returncode == 1 and "cannot be listed" in listed.stderr


@pytest.fixture(scope="session")
def base_install(tmp_path_factory) -> Path:
    """A fresh virtual environment with only the base install of this checkout (`pip install <copy of the
    checkout>`, its real dependencies, no extras), made once per test session; its bin/ folder."""
    import venv

    root = tmp_path_factory.mktemp("base-install")
    src = root / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):  # the working tree as git sees it (not .venv, data/ or build outputs)
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes((ROOT / f).read_bytes())
    venv.create(root / "venv", with_pip=True)
    py = root / "venv" / "bin" / "python"
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
                          capture_output=True, text=True, timeout=1800, env=_env(root))
    if proc.returncode != 0:
        offline = any(w in proc.stdout + proc.stderr for w in ("NewConnectionError", "No matching distribution",
                                                              "Temporary failure in name resolution"))
        if offline:
            pytest.skip(f"the base install's dependencies cannot be fetched here (no package index): {proc.stderr[-300:]}")
        raise AssertionError(f"pip install of the base package failed:\n{proc.stdout}\n{proc.stderr}")
    return root / "venv" / "bin"


def test_the_researchers_path_in_a_fresh_base_install(base_install, tmp_path, s3_server, s3_env):
    """releases, pull latest from a public bucket (--anon), evaluate the pulled folder with your own embeddings
    and with the baseline model, from a folder outside the checkout, with only the base install: the scores of
    the in-store evaluation; a cutoff after every query exits non-zero; a build command names its extra."""
    py = base_install / "python"
    store = _public_bucket(s3_server, [make_release(V1, range(0, 4)), with_noise(make_release(V2, range(2, 14)))],
                           "lookbench-researcher")
    ref = run_evaluation(store, V2, ["baseline/hsv-hog-v1"], tmp_path / "ref-cache", n_examples=0).scores
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    home = tmp_path / "home"

    def lookbench(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(base_install / "lookbench"), *args], cwd=outside, env=_env(home),
                              capture_output=True, text=True, timeout=600)

    found = subprocess.run([str(py), "-c", "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] "
                            "if u.find_spec(m)))", *BUILD_STACK], capture_output=True, text=True, cwd=outside)
    assert found.returncode == 0 and found.stdout.split() == [], f"the base install has {found.stdout}"
    s3 = ["--store", "s3://lookbench-researcher/bench", "--endpoint-url", s3_server, "--anon"]
    proc = lookbench("releases", *s3)
    assert proc.returncode == 0 and proc.stdout.split() == [V1, V2], proc.stderr
    proc = lookbench("pull", "latest", *s3, "--dest", "rel", "--quiet")
    assert proc.returncode == 0, proc.stderr
    folder = outside / "rel" / V2
    export_embeddings(folder, tmp_path / "mine.parquet")
    proc = lookbench("evaluate", str(folder), "--embeddings", str(tmp_path / "mine.parquet"), "--name", "mine",
                     "--quiet", "--output", "mine-scores.parquet")
    assert proc.returncode == 0, proc.stderr
    proc_b = lookbench("evaluate", str(folder), "--model", "baseline/hsv-hog-v1", "--quiet", "--output", "b.parquet")
    assert proc_b.returncode == 0, proc_b.stderr
    cols = ["subset", "metric", "value", "ci_low", "ci_high", "n_queries"]
    want = sorted(tuple(r[c] for c in cols) for r in ref.to_pylist())
    assert any(r[1] == "distractor@1" for r in want), "the noise gallery is part of the scores"
    for out in ("mine-scores.parquet", "b.parquet"):
        assert sorted(tuple(r[c] for c in cols) for r in pq.read_table(outside / out).to_pylist()) == want
    proc = lookbench("evaluate", str(folder), "--embeddings", str(tmp_path / "mine.parquet"), "--cutoff",
                     "2031-01-01", "--quiet")
    assert proc.returncode == 1 and "nothing was scored" in proc.stderr, proc.stderr
    proc = lookbench("build")
    assert proc.returncode == 2 and "pip install 'lookbench-pipeline[build]'" in proc.stderr, proc.stderr
    proc = lookbench("releases")  # no pipeline configuration here to take a store from
    assert proc.returncode == 2 and "name the store to read: --store URL" in proc.stderr, proc.stderr
    proc = lookbench("evaluate", "--release", "latest", "--model", "baseline/hsv-hog-v1", "--quiet")
    assert proc.returncode == 2 and "name the store to read: --store URL" in proc.stderr, proc.stderr
    # the store from the environment, no configuration file: the version in it is scored (no demo site loaded)
    env = {**_env(home), "LOOKBENCH_STORE__URL": "s3://lookbench-researcher/bench",
           "LOOKBENCH_STORE__ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.run([str(base_install / "lookbench"), "evaluate", "--release", V2, "--model",
                           "baseline/hsv-hog-v1", "--quiet", "--output", "e.parquet"], cwd=outside, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (outside / "e.parquet").unlink()
    assert sorted(p.name for p in outside.iterdir()) == ["b.parquet", "mine-scores.parquet", "rel"], \
        "a consumer command makes no pipeline folders where it runs"
