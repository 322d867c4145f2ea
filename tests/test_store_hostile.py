"""A store or mirror that someone else controls, read by the consumer commands (``releases``, ``info``, ``pull``,
``evaluate --release``): bodies without end, a trickle, redirects elsewhere, a manifest that changes between two
reads or names a key twice, symbolic links, and a destination inside the store. Each test serves its hostile
input itself (a local http server or a folder) and expects one clear error, or a warning where the input is
ordinary."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from release_factory import make_release

from lookbench_pipeline.cli import main
from lookbench_pipeline.releases import ReleaseIntegrityError
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import HttpStore, LocalStore, StoreError

V1, V2 = "v20260301", "v20260701"


@pytest.fixture
def store(tmp_path) -> LocalStore:
    s = LocalStore(tmp_path / "store")
    publish(make_release(V1, range(0, 4)), s, {})
    publish(make_release(V2, range(2, 8)), s, {})
    return s


Answer = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def mirror(root: Path | None, special: dict[str, Answer] | None = None) -> Iterator[ThreadingHTTPServer]:
    """A 127.0.0.1 http server: the paths of ``special`` answered by their function (given the handler), the
    others from the files under ``root`` (404 when missing). ``.hits``: the paths asked for."""
    special = special or {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_HEAD(self):
            self._answer(head=True)

        def do_GET(self):
            self._answer(head=False)

        def _answer(self, head: bool):
            self.server.hits.append(self.path)
            if self.path in special:
                try:
                    special[self.path](self)
                except OSError:  # the client gave up and hung up
                    pass
                return
            f = root / self.path.lstrip("/") if root is not None else None
            body = f.read_bytes() if f is not None and f.is_file() else None
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            if not head:
                self.wfile.write(body or b"")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.hits = []
    srv.base_url = f"http://127.0.0.1:{srv.server_address[1]}"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def endless(h: BaseHTTPRequestHandler) -> None:
    """A 200 whose body never ends (no Content-Length; at most 64 MB, so a failing test ends)."""
    h.send_response(200)
    h.send_header("Connection", "close")
    h.end_headers()
    if h.command == "HEAD":
        return
    block = b"{" * 65536
    for _ in range(1024):
        h.wfile.write(block)


def trickle(body: bytes, every_s: float = 0.05) -> Answer:
    """A 200 with the right Content-Length that sends ``body`` a byte every ``every_s`` seconds."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command == "HEAD":
            return
        for i in range(len(body)):
            h.wfile.write(body[i : i + 1])
            h.wfile.flush()
            time.sleep(every_s)
    return answer


def redirect(to: str) -> Answer:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", to)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return answer


# 1: bodies are bounded

def test_an_endless_manifest_is_refused_at_the_limit(store, tmp_path, capsys):
    key = f"/releases/{V2}/manifest.json"
    with mirror(store.root, {key: endless}) as srv:
        assert main(["info", V2, "--store", srv.base_url]) == 1
    err = capsys.readouterr().err
    assert "more than" in err and "manifest.json" in err and "bytes" in err and "Traceback" not in err


def test_an_endless_latest_pointer_is_refused_at_its_limit(store, tmp_path, capsys):
    with mirror(store.root, {"/releases/latest": endless}) as srv:
        assert main(["info", "latest", "--store", srv.base_url]) == 1
    err = capsys.readouterr().err
    assert "releases/latest: more than 1024 bytes" in err


def test_a_data_file_read_over_http_is_bounded_by_the_manifest_bytes(store):
    from lookbench_pipeline.releases.reader import read_file, read_manifest

    key = f"/releases/{V2}/real_studio_flat/query.parquet"
    with mirror(store.root, {key: endless}) as srv:
        s = HttpStore(srv.base_url)
        with pytest.raises(ReleaseIntegrityError, match="more than the manifest's"):
            read_file(s, V2, "real_studio_flat", "query", manifest=read_manifest(s, V2))


def test_a_data_file_of_another_size_than_the_manifest_says_is_refused(store):
    """The manifest's ``bytes`` is checked as pull checks it, even when the sha256 matches (17)."""
    from lookbench_pipeline.releases.reader import read_file, read_manifest

    m = read_manifest(store, V2)
    m["files"]["real_studio_flat/query.parquet"]["bytes"] += 1
    with pytest.raises(ReleaseIntegrityError, match="bytes, the manifest says"):
        read_file(store, V2, "real_studio_flat", "query", manifest=m)


# 9: an overall deadline

def test_a_trickling_mirror_is_given_up_after_the_deadline_naming_url_and_limit(store, monkeypatch):
    import lookbench_pipeline.store as st

    monkeypatch.setattr(st, "HTTP_DEADLINE_S", 0.3)
    key = f"/releases/{V2}/manifest.json"
    body = (store.root / key.lstrip("/")).read_bytes()
    with mirror(store.root, {key: trickle(body)}) as srv:
        s = HttpStore(srv.base_url)
        t0 = time.monotonic()
        with pytest.raises(StoreError) as exc:
            s.get_bytes(key.lstrip("/"), max_bytes=1 << 20)
        assert time.monotonic() - t0 < 10
    msg = str(exc.value)
    assert f"{srv.base_url}{key}" in msg and "not complete after" in msg and "too slow" in msg


def test_the_shipped_deadline_grows_with_the_size():
    s = HttpStore("http://127.0.0.1:9")
    assert s.deadline_s >= 60 and 1024 <= s.min_bytes_per_s <= 1 << 20


# 10: redirects

def test_a_redirect_to_another_host_is_followed_with_a_warning_naming_both(store, capsys):
    with mirror(store.root) as cdn:
        port = cdn.server_address[1]
        # 127.0.0.1 and localhost are two hosts as far as the URL says
        to = f"http://localhost:{port}/releases/{V2}/manifest.json"
        with mirror(None, {f"/releases/{V2}/manifest.json": redirect(to)}) as srv:
            srv_host = f"127.0.0.1:{srv.server_address[1]}"
            with pytest.warns(UserWarning, match=f"{srv_host} redirects to another host, localhost:{port}"):
                from lookbench_pipeline.releases.reader import read_manifest_bytes

                read_manifest_bytes(HttpStore(srv.base_url), V2, exists=True)


def test_a_redirect_from_https_to_http_is_refused():
    from unittest import mock

    import requests

    from lookbench_pipeline.store import _mirror_session

    s = _mirror_session("https://mirror.example")
    resp = requests.Response()
    resp.url, resp.status_code = "https://mirror.example/releases/latest", 302
    resp.headers["Location"] = "http://mirror.example/releases/latest"
    with mock.patch.object(requests.Session, "get_redirect_target", return_value=resp.headers["Location"]):
        with pytest.raises(StoreError, match="refused a redirect from https to http"):
            s.get_redirect_target(resp)


# 3: one manifest read for every file of evaluate --release

def test_evaluate_over_a_mirror_checks_every_file_against_one_manifest_read(store, tmp_path, monkeypatch):
    """A mirror that sends the genuine manifest first and a rewritten one afterwards: the files are checked
    against the first, so a file changed to match the second is refused."""
    from lookbench_pipeline.releases.reader import read_file, read_manifest

    key = f"releases/{V2}/real_studio_flat/query.parquet"
    genuine = read_manifest(store, V2)
    (store.root / key).write_bytes((store.root / key).read_bytes() + b"x")  # the mirror's rewritten file
    import hashlib

    forged = json.loads((store.root / f"releases/{V2}/manifest.json").read_bytes())
    forged["files"]["real_studio_flat/query.parquet"].update(
        sha256=hashlib.sha256((store.root / key).read_bytes()).hexdigest(), bytes=(store.root / key).stat().st_size)
    (store.root / f"releases/{V2}/manifest.json").write_text(json.dumps(forged))
    with mirror(store.root) as srv:
        s = HttpStore(srv.base_url)
        with pytest.raises(ReleaseIntegrityError):
            read_file(s, V2, "real_studio_flat", "query", manifest=genuine)
        assert not any(h.endswith("manifest.json") for h in srv.hits)


# 11: duplicate keys

def test_a_manifest_naming_a_key_twice_is_refused_naming_the_key(store, capsys):
    path = store.root / f"releases/{V2}/manifest.json"
    text = path.read_text()
    assert text.count('"files": {') == 1
    path.write_text(text.replace('"files": {', '"files": {"real_studio_flat/query.parquet": {"sha256": "' + "0" * 64
                                 + '", "bytes": 1}, '))
    assert main(["info", V2, "--store", str(store.root)]) == 1
    err = capsys.readouterr().err
    assert "names 'real_studio_flat/query.parquet' twice" in err


# 4: links in a folder store's releases

@pytest.mark.parametrize("link", ["releases", f"releases/{V2}"])
def test_releases_refuses_a_linked_releases_or_version_folder(store, tmp_path, capsys, link):
    real = tmp_path / "elsewhere"
    (store.root / link).rename(real)
    (store.root / link).symlink_to(real, target_is_directory=True)
    assert main(["releases", "--store", str(store.root)]) == 1
    err = capsys.readouterr().err
    assert f"{store.root / link}" in err and "symbolic link" in err and "no releases" not in err


def test_a_redirect_to_another_host_is_one_warning_line_in_the_cli(store, capsys):
    with mirror(store.root) as cdn:
        port = cdn.server_address[1]
        moved = {f"/releases/{V2}/{f}": redirect(f"http://localhost:{port}/releases/{V2}/{f}")
                 for f in ("manifest.json",)}
        with mirror(None, moved) as srv:
            assert main(["info", V2, "--store", srv.base_url]) == 0
    err = capsys.readouterr().err
    assert err.count(f"warning: {srv.base_url}: the mirror 127.0.0.1:{srv.server_address[1]} redirects to another "
                     f"host, localhost:{port}") == 1
    assert "UserWarning" not in err


# 14: a pull into the store it reads

@pytest.mark.parametrize("where", ["store", f"store/releases/{V2}", "."])
def test_a_pull_into_the_store_folder_or_around_it_is_refused(store, tmp_path, capsys, where):
    dest = tmp_path / where if where != "." else store.root.parent
    if where == ".":  # dest/<version> would be the store itself
        store2 = LocalStore(tmp_path / V2)
        publish(make_release(V2, range(2, 8)), store2, {})
        src, dest = store2, tmp_path
    else:
        src = store
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main(["pull", V2, "--store", str(src.root), "--dest", str(dest), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert ("inside the store" in err or "is inside" in err) and str(src.root) in err
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_a_pull_beside_the_store_is_fine(store, tmp_path):
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / V2 / "manifest.json").is_file()


# 8: a dataset card that cannot be limited to the subsets pulled

def _replace_file(store: LocalStore, version: str, key: str, data: bytes) -> None:
    """``key`` of ``version`` replaced by ``data``, its manifest entry with it (a publisher's own file)."""
    import hashlib

    (store.root / f"releases/{version}/{key}").write_bytes(data)
    path = store.root / f"releases/{version}/manifest.json"
    m = json.loads(path.read_bytes())
    where = "metadata_files" if key in m.get("metadata_files", {}) else "files"
    m[where][key].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    path.write_text(json.dumps(m, indent=2))


@pytest.mark.parametrize("card", [b"# LookBench\n\nno front matter\n",
                                  b"---\nconfigs: !!python/object/apply:os.system ['echo hi']\n---\n# x\n"])
def test_a_partial_pull_keeps_a_card_it_cannot_limit_with_a_warning(store, tmp_path, capsys, card):
    _replace_file(store, V2, "README.md", card)
    argv = ["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet",
            "--subset", "real_studio_flat"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"warning: {V2}/README.md (the dataset card) is kept as published" in err and err.count("\n") == 1
    assert (tmp_path / "d" / V2 / "manifest.json").is_file()
    assert (tmp_path / "d" / V2 / "README.md").read_bytes() == card
    assert main(argv) == 0, "a rerun is not stuck either"


def test_limit_card_says_a_python_tag_in_one_line():
    from lookbench_pipeline.releases.reader import limit_card

    with pytest.raises(ValueError, match="not plain YAML") as exc:
        limit_card("---\nconfigs: !!python/object/apply:os.system ['echo hi']\n---\n", ["real_studio_flat"])
    assert "\n" not in str(exc.value)


# 12: a manifest without a subset

def test_a_manifest_without_a_subset_is_an_error_in_info_and_a_reason_in_evaluate(store, tmp_path, capsys):
    path = store.root / f"releases/{V2}/manifest.json"
    path.write_text(json.dumps({"version": V2, "files": {}}))
    assert main(["info", V2, "--store", str(store.root)]) == 1
    err = capsys.readouterr().err
    assert f"error: {V2}: no subset to score: its manifest lists no subset's query and gallery files" in err
    emb = tmp_path / "mine.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"sample_id": ["a"], "embedding": [[1.0, 0.0]]}), emb)
    code = main(["evaluate", "--release", V2, "--store", str(store.root), "--embeddings", str(emb), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "no subset to score" in err  # evaluate's own warning (main, 337bf0d), above its error


# 16: store URLs and their messages

@pytest.mark.parametrize("argv, match", [
    (["--store", "{root}", "--anon"], "--anon goes with --store s3://bucket/prefix"),
    (["--store", "http://127.0.0.1:9", "--endpoint-url", "http://x"], "--endpoint-url goes with --store s3://"),
    (["--store", "s3://"], "names no bucket"),
    (["--store", "http://"], "names no host"),
    (["--store", "HTTPS://"], "names no host"),
    (["--store", "file://"], "names no local folder"),
    (["--store", "file://somehost/x"], "names no local folder"),
    (["--store", "{file}"], "it is a file, not a folder"),
])
def test_store_urls_that_name_no_store_are_usage_errors(store, tmp_path, capsys, argv, match):
    f = tmp_path / "hostname"
    f.write_text("x\n")
    argv = [a.format(root=store.root, file=f) for a in argv]
    assert main(["releases", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1, err


def test_store_url_schemes_are_case_insensitive_and_file_urls_name_a_folder(store, capsys):
    with mirror(store.root) as srv:
        assert main(["info", V2, "--store", srv.base_url.replace("http://", "HTTP://")]) == 0
    assert main(["releases", "--store", f"file://{store.root}"]) == 0
    assert capsys.readouterr().out.split()[-2:] == [V1, V2]


def test_latest_naming_an_unpublished_version_says_latest_pointed_there(store, capsys):
    (store.root / "releases/latest").write_text("v20261231\n")
    assert main(["info", "latest", "--store", str(store.root)]) == 1
    err = capsys.readouterr().err
    assert "release v20261231 is not published" in err and "releases/latest names it" in err


def test_a_missing_bucket_is_named_and_missing_credentials_suggest_anon(s3_server, s3_env, monkeypatch, capsys):
    assert main(["info", "latest", "--store", "s3://nobucket/p", "--endpoint-url", s3_server]) == 1
    err = capsys.readouterr().err
    assert "no such bucket 'nobucket'" in err
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it keeps the credentials it found first
    assert main(["info", "latest", "--store", "s3://nobucket/p", "--endpoint-url", s3_server]) == 1
    err = capsys.readouterr().err
    assert "Unable to locate credentials" in err and "--anon" in err


# 17: what a pull meets in --dest

@pytest.mark.parametrize("kind", ["folder", "link"])
def test_a_stale_part_that_is_a_folder_or_link_says_what_to_remove(store, tmp_path, capsys, kind):
    part = tmp_path / "d" / V2 / "real_studio_flat" / "gallery.parquet.part"
    part.parent.mkdir(parents=True)
    if kind == "folder":
        part.mkdir()
    else:
        part.symlink_to(tmp_path / "elsewhere")
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"is a {'folder' if kind == 'folder' else 'symbolic link'}" in err and "remove it (rm -r " in err
    assert "Errno" not in err and err.count("\n") == 1


def test_a_version_folder_that_is_a_file_is_named(store, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / V2).write_text("x")
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'd' / V2} exists and is not a folder" in err and "Errno" not in err


def test_a_dest_on_a_file_system_without_files_is_named(store, capsys):
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    assert main(["pull", V2, "--store", str(store.root), "--dest", "/proc/lookbench-nothing", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "holds no files" in err and "GB free" not in err


def test_a_second_pull_into_the_same_folder_stops_at_once(store, tmp_path):
    import fcntl
    import os

    from lookbench_pipeline.releases import pull

    out = tmp_path / "d" / V2
    out.mkdir(parents=True)
    fd = os.open(out / ".pull.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the first pull
        with pytest.raises(ValueError, match="another pull is writing"):
            pull(store, V2, tmp_path / "d", progress=False)
    finally:
        os.close(fd)
    pull(store, V2, tmp_path / "d", progress=False)
    assert (out / "manifest.json").is_file() and not (out / ".pull.lock").exists()


def test_a_cache_that_is_a_file_is_a_usage_error_before_anything_is_read(store, tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.write_text("x")
    code = main(["evaluate", "--release", V2, "--store", str(store.root), "--model", "baseline/hsv-hog-v1",
                 "--cache", str(cache), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"--cache {cache}: {cache} is a file" in err


def test_evaluate_release_over_a_mirror_that_switches_manifests_is_refused(store, tmp_path, capsys):
    """The trial's case: the genuine manifest on the first read, a rewritten one (item_IDs shuffled in a file, its
    entry updated) on every later read. Checked against the first read, the rewritten file is refused."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    mkey = f"/releases/{V2}/manifest.json"
    genuine = (store.root / mkey.lstrip("/")).read_bytes()
    key = "real_studio_flat/query.parquet"
    t = pq.read_table(store.root / f"releases/{V2}/{key}")
    ids = t.column("item_ID").to_pylist()
    t = t.set_column(t.schema.get_field_index("item_ID"), "item_ID", pa.array(ids[1:] + ids[:1], t.schema.field(
        "item_ID").type))
    pq.write_table(t, store.root / f"releases/{V2}/{key}")
    data = (store.root / f"releases/{V2}/{key}").read_bytes()
    forged = json.loads(genuine)
    forged["files"][key].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    forged_bytes = json.dumps(forged).encode()
    reads = []

    def manifest(h: BaseHTTPRequestHandler) -> None:
        body = genuine if (h.command == "HEAD" or not reads) else forged_bytes
        if h.command == "GET":
            reads.append(1)
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command == "GET":
            h.wfile.write(body)

    with mirror(store.root, {mkey: manifest}) as srv:
        code = main(["evaluate", "--release", V2, "--store", srv.base_url, "--model", "baseline/hsv-hog-v1",
                     "--quiet", "--cache", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 1 and f"{V2}/{key}" in err and "the manifest" in err, err


def test_a_manifest_part_that_is_a_folder_says_what_to_remove(store, tmp_path, capsys):
    (tmp_path / "d" / V2 / "manifest.json.part").mkdir(parents=True)
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "manifest.json.part is a folder" in err and "remove it (rm -r " in err and "Errno" not in err


def test_a_mirror_that_trickles_its_headers_is_given_up_after_the_deadline(store, monkeypatch):
    import lookbench_pipeline.store as st

    monkeypatch.setattr(st, "HTTP_DEADLINE_S", 0.5)

    def slow_headers(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(200):  # at most 10 s, so a failing test ends
            h.wfile.write(b"X-Slow: 1\r\n")
            h.wfile.flush()
            time.sleep(0.05)

    with mirror(store.root, {"/releases/latest": slow_headers}) as srv:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="no complete answer .status and headers. after 0 s"):
            HttpStore(srv.base_url).get_bytes("releases/latest", max_bytes=1024)
        assert time.monotonic() - t0 < 5
