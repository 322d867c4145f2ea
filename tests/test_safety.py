"""Hostile input at the edges: a manifest that names paths outside the pull's folder, pages that opt out of
indexing. Each test builds its hostile input itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from release_factory import make_release

from lookbench_pipeline import demo_shop, serve
from lookbench_pipeline.cli import main
from lookbench_pipeline.config import load_config
from lookbench_pipeline.crawl import run_spider
from lookbench_pipeline.optout import directives, page_optout
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.release import publish, pull
from lookbench_pipeline.safepath import UnsafePathError, check_key, resolve_inside

V1 = "v20260301"


@pytest.fixture
def cfg(tmp_path) -> str:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"data_dir": "data", "store": {"url": "store"}}))
    return str(path)


@pytest.mark.parametrize("key", ["/etc/passwd", "//server/share/x", "C:/x", "c:x", "a\\..\\..\\x", "a/../../x",
                                 "../x", "./x", "a//b", "", "a/\x00b", "a/\nb"])
def test_unsafe_keys_refused(key, tmp_path):
    with pytest.raises(UnsafePathError):
        check_key(key)
    with pytest.raises(UnsafePathError):
        resolve_inside(tmp_path, key)


def test_symlink_escape_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        resolve_inside(root, "sub/file.parquet")
    assert resolve_inside(root, "ok/file.parquet") == root / "ok" / "file.parquet"


@pytest.mark.parametrize("evil", ["/tmp/{victim}", "real_studio_flat/../../{victim_rel}", "//host/x", "C:/x"])
def test_pull_refuses_a_hostile_manifest_before_writing(evil, cfg, tmp_path, capsys):
    store = store_of(load_config(cfg))
    publish(make_release(V1, range(0, 4)), store, {})
    victim = tmp_path / "victim.txt"
    key = evil.format(victim=victim, victim_rel=victim.name)
    manifest = json.loads(store.get_bytes(f"releases/{V1}/manifest.json"))
    manifest["files"][key] = {"sha256": "0" * 64, "bytes": 3}
    store.put_bytes(f"releases/{V1}/manifest.json", json.dumps(manifest).encode())
    dest = tmp_path / "dest"
    assert main(["pull", V1, "--dest", str(dest), "--quiet", "--config", cfg]) == 1
    err = capsys.readouterr().err
    assert key in err and any(w in err for w in ("absolute", "drive", "'..'", "outside")), err
    assert not victim.exists()
    assert not (dest / V1).exists() or not any(p.is_file() for p in (dest / V1).rglob("*")), "nothing is written"


def test_pull_latest_and_a_hostile_latest(cfg, tmp_path, capsys):
    store = store_of(load_config(cfg))
    publish(make_release(V1, range(0, 4)), store, {})
    assert main(["pull", "latest", "--dest", str(tmp_path / "d"), "--quiet", "--config", cfg]) == 0
    assert f"of {V1} verified" in capsys.readouterr().out
    store.put_bytes("releases/latest", b"../../etc")
    with pytest.raises(UnsafePathError):
        pull(store, "latest", tmp_path / "e", progress=False)
    assert main(["pull", "latest", "--dest", str(tmp_path / "e"), "--quiet", "--config", cfg]) == 1
    assert "not a release version" in capsys.readouterr().err


def test_robots_directives():
    assert page_optout(["noindex"], [], "lookbenchbot") == "robots_noindex"
    assert page_optout(["googlebot: noindex, nofollow"], [], "lookbenchbot") == "robots_noindex"
    assert page_optout(["otherbot: noindex"], [], "lookbenchbot") is None
    assert page_optout(["lookbenchbot: noimageindex"], [], "lookbenchbot") == "robots_noimageindex"
    assert page_optout([], [("robots", "NOINDEX, follow")], "lookbenchbot") == "robots_noindex"
    assert page_optout([], [("LookBenchBot", "none")], "lookbenchbot") == "robots_noindex"
    assert page_optout([], [("robots", "noai")], "lookbenchbot") == "robots_noimageindex"
    assert page_optout(["unavailable_after: 25 Jun 2030 15:00:00 PST"], [], "lookbenchbot") is None
    assert directives(["otherbot: noindex, lookbenchbot: noimageindex"], [], "lookbenchbot") == {"noimageindex"}


def test_crawl_honours_page_noindex_and_noimageindex(tmp_path):
    site = yaml.safe_load(Path("lookbench_pipeline/data/sites/demo.yaml").read_text())
    site.update(demo_products=4, demo_looks=1)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    root = tmp_path / "shop"
    demo_shop.generate(root, 4, 1, 7)
    p0 = root / "products/demo-0000.html"
    p0.write_text(p0.read_text().replace("<head>", "<head><meta name='robots' content='noindex, follow'>", 1))
    headers = lambda path: {"X-Robots-Tag": "test-bot: noimageindex"} if path.endswith("demo-0001.html") else {}  # noqa: E731
    with serve.serving(serve.static_resolver(root), headers) as srv:
        feed, _ = run_spider(tmp_path / "demo.yaml", srv.base_url, tmp_path / "crawl", "test-bot (+https://x.invalid)")
        hits = list(srv.hits)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    products = {i["sku"]: i for i in items if i["kind"] == "product"}
    assert "DEMO-0000" not in products
    pages = {i["url"].rsplit("/", 1)[-1]: i for i in items if i["kind"] == "page"}
    assert (pages["demo-0000.html"]["outcome"], pages["demo-0000.html"]["reason"]) == ("rejected", "robots_noindex")
    refused = products["DEMO-0001"]["images"]
    assert refused and all(d["reason"] == "robots_noimageindex" and d["path"] is None for d in refused)
    assert not any("demo-0001-" in h for h in hits), "an opted-out image was fetched"
    assert all(d["path"] for d in products["DEMO-0002"]["images"])


@pytest.mark.parametrize("body,match", [(b"not json", "is not JSON"), (b"[1, 2]", "not a release manifest"),
                                        (b'{"files": []}', "not a release manifest")])
def test_pull_refuses_a_manifest_that_is_not_one(body, match, cfg, tmp_path, capsys):
    store = store_of(load_config(cfg))
    publish(make_release(V1, range(0, 4)), store, {})
    store.put_bytes(f"releases/{V1}/manifest.json", body)
    assert main(["pull", V1, "--dest", str(tmp_path / "d"), "--quiet", "--config", cfg]) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "d").exists()
