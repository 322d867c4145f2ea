"""The researcher's path from a folder outside the checkout: list and pull a release from any store with
`--store` (an S3 bucket read anonymously, a static http(s) mirror), no pipeline configuration at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from release_factory import make_release

from lookbench_pipeline import serve
from lookbench_pipeline.release import publish
from lookbench_pipeline.store import LocalStore, open_store

V1, V2 = "v20260301", "v20260701"


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LOOKBENCH_"))}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_EC2_METADATA_DISABLED="true")
    return subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_pull_latest_from_a_public_bucket_anonymously(tmp_path, s3_server, s3_env):
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_server)
    s3.create_bucket(Bucket="lookbench-public")
    # a public bucket, as a release is published: anyone may list and read, nobody anonymous may write
    s3.put_bucket_policy(Bucket="lookbench-public", Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::lookbench-public/*"},
        {"Effect": "Allow", "Principal": "*", "Action": ["s3:ListBucket"], "Resource": "arn:aws:s3:::lookbench-public"}]}))
    store = open_store("s3://lookbench-public/bench", endpoint_url=s3_server)
    publish(make_release(V1, range(0, 4)), store, {})
    publish(make_release(V2, range(2, 8)), store, {})
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="lookbench-public"):
        for obj in page.get("Contents", []):  # moto checks anonymous reads against object ACLs
            s3.put_object_acl(Bucket="lookbench-public", Key=obj["Key"], ACL="public-read")
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
