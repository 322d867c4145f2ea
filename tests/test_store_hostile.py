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

import local_http

V1, V2 = "v20260301", "v20260701"


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

    srv = local_http.serve(Handler)
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


def no_head(path: Path) -> Answer:
    """The file at ``path`` for a GET (the first byte for ``Range: bytes=0-0``), 405 for a HEAD, as some static hosts
    and proxies answer."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        if h.command == "HEAD":
            h.send_response(405)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        body = path.read_bytes()
        if h.headers.get("Range") == "bytes=0-0":
            h.send_response(206)
            h.send_header("Content-Range", f"bytes 0-0/{len(body)}")
            body = body[:1]
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return answer


def test_a_mirror_that_does_not_answer_head_is_read_with_get(store, tmp_path, capsys):
    special = {f"/{k}": no_head(store.root / k) for k in ("releases/latest", f"releases/{V2}/manifest.json")}
    with mirror(store.root, special) as srv:
        assert main(["info", "latest", "--store", srv.base_url]) == 0, capsys.readouterr().err
        assert HttpStore(srv.base_url).exists("releases/latest")
        assert not HttpStore(srv.base_url).exists("releases/nothing-here")


# 1: bodies are bounded
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


def silent(h: BaseHTTPRequestHandler) -> None:
    """No answer at all for a few seconds, then the connection closed."""
    time.sleep(3)


@pytest.mark.parametrize("how", ["get_bytes", "read_range"])
def test_a_trickling_s3_endpoint_is_given_up_after_the_deadline_naming_the_object_and_limit(store, monkeypatch,
                                                                                           how):
    """The S3 path has the mirror's overall deadline (botocore's own timeouts bound each network read only): a
    server that sends a byte every 50 ms is given up, naming the object and the limit; the thread that read for
    it ends once the server stops sending."""
    import lookbench_pipeline.store as st

    monkeypatch.setattr(st, "HTTP_DEADLINE_S", 0.3)
    key = f"releases/{V2}/manifest.json"
    body = (store.root / key).read_bytes()[:40]  # 2 s of trickle
    with mirror(store.root, {f"/bucket/lb/{key}": trickle(body)}) as srv:
        s = st.S3Store("s3://bucket/lb", endpoint_url=srv.base_url, anonymous=True, max_attempts=1)
        t0 = time.monotonic()
        with pytest.raises(StoreError) as exc:
            if how == "get_bytes":
                s.get_bytes(key)
            else:
                b"".join(s.read_range(key, size=len(body)))
        assert time.monotonic() - t0 < 10
        for _ in range(100):  # within the server's 2 s, and botocore's read timeout
            if not any(t.name == "lookbench-s3-get" for t in threading.enumerate()):
                break
            time.sleep(0.1)
        assert not any(t.name == "lookbench-s3-get" for t in threading.enumerate())
    msg = str(exc.value)
    assert f"s3://bucket/lb/{key}: not complete after" in msg and f"the limit for {len(body)} bytes" in msg, msg
    assert "too slow" in msg


def test_an_s3_endpoint_that_does_not_answer_is_given_up_after_the_deadline(store, monkeypatch, tmp_path):
    import lookbench_pipeline.store as st

    monkeypatch.setattr(st, "HTTP_DEADLINE_S", 0.3)
    key = f"releases/{V2}/manifest.json"
    (tmp_path / "bucket").mkdir()
    (tmp_path / "bucket" / "lb").symlink_to(store.root, target_is_directory=True)  # the bucket's objects
    with mirror(tmp_path, {f"/bucket/lb/{key}": silent}) as srv:
        s = st.S3Store("s3://bucket/lb", endpoint_url=srv.base_url, anonymous=True, max_attempts=1)
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=rf"s3://bucket/lb/{key}: no answer after 0 s: the store is too slow"):
            s.get_bytes(key)
        assert time.monotonic() - t0 < 2.5
        # within the deadline, a read is as before
        s.deadline_s = 30
        other = f"releases/{V2}/croissant.json"
        assert s.get_bytes(other) == (store.root / other).read_bytes()
        blocks = list(s.read_range(other, chunk=7, size=(store.root / other).stat().st_size))
        assert b"".join(blocks) == (store.root / other).read_bytes() and len(blocks[0]) == 7


def announcing(length: int, body: bytes = b"v20260701") -> Answer:
    """A 200 that announces ``length`` bytes, sends ``body`` and hangs up."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        h.send_response(200)
        h.send_header("Content-Length", str(length))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)
            h.wfile.flush()
    return answer


def both_stores(srv: ThreadingHTTPServer, kind: str):
    """``(store, url of its objects)``: the test server read as a mirror, or as an unsigned S3 endpoint whose bucket
    ``bucket`` holds the store under ``lb/`` (the paths served must then start with ``/bucket/lb``)."""
    import lookbench_pipeline.store as st

    if kind == "mirror":
        return HttpStore(srv.base_url + "/bucket/lb"), srv.base_url + "/bucket/lb"
    return st.S3Store("s3://bucket/lb", endpoint_url=srv.base_url, anonymous=True, max_attempts=1), "s3://bucket/lb"


@pytest.mark.parametrize("kind,server", [("mirror", "mirror"), ("s3", "store")])
def test_an_announced_size_over_the_limit_is_refused_before_the_body_by_both_stores(kind, server):
    """A ``releases/latest`` (at most 1 KiB) whose answer announces 10^15 bytes is refused at once, naming the size
    and the limit, in the same words for a mirror and an S3 endpoint (S3 trusted the ``Content-Length`` and gave
    the read a deadline of about a year)."""
    from lookbench_pipeline.releases.reader import LATEST_KEY, LATEST_MAX_BYTES, read_small
    from lookbench_pipeline.store import ObjectTooLarge

    with mirror(None, {f"/bucket/lb/{LATEST_KEY}": announcing(10**15)}) as srv:
        s, where = both_stores(srv, kind)
        t0 = time.monotonic()
        with pytest.raises(ObjectTooLarge) as exc:
            read_small(s, LATEST_KEY, LATEST_MAX_BYTES)
        assert time.monotonic() - t0 < 5
    assert str(exc.value) == (f"{where}/{LATEST_KEY}: the {server} announces {10**15} bytes, more than the "
                              f"{LATEST_MAX_BYTES} bytes this file may have: refused")


def test_a_huge_announced_size_without_a_limit_is_read_as_far_as_it_goes_on_s3():
    """Without ``max_bytes`` the announced 10^15 bytes set the deadline (about a year): the waits for the next
    block stay within what the queue takes (they overflowed its timeout), and the short body is an error."""
    import lookbench_pipeline.store as st

    with mirror(None, {"/bucket/lb/releases/latest": announcing(10**15)}) as srv:
        s = st.S3Store("s3://bucket/lb", endpoint_url=srv.base_url, anonymous=True, max_attempts=1)
        with pytest.raises(StoreError) as exc:
            s.get_bytes("releases/latest")
    assert "total bytes expected is 1000000000000000" in str(exc.value) and "out of range" not in str(exc.value)


@pytest.mark.parametrize("kind", ["mirror", "s3"])
def test_an_endless_small_read_is_refused_at_its_limit_by_both_stores(kind):
    from lookbench_pipeline.releases.reader import LATEST_KEY, read_small
    from lookbench_pipeline.store import ObjectTooLarge

    with mirror(None, {f"/bucket/lb/{LATEST_KEY}": endless}) as srv:
        s, where = both_stores(srv, kind)
        with pytest.raises(ObjectTooLarge) as exc:
            read_small(s, LATEST_KEY, 1024)
    assert str(exc.value) == (f"{where}/{LATEST_KEY}: more than 1024 bytes, the most this file may have: refused "
                              "(not a file of a release)")


def test_both_stores_word_the_deadline_alike(store, monkeypatch):
    """A mirror and an S3 endpoint that trickle the same body are given up with the same message (the object, the
    limit and its parts), but for the kind of server and the mirror's advice to try another."""
    import lookbench_pipeline.store as st

    monkeypatch.setattr(st, "HTTP_DEADLINE_S", 0.3)
    key = f"releases/{V2}/manifest.json"
    body = (store.root / key).read_bytes()[:40]
    said = {}
    with mirror(None, {f"/bucket/lb/{key}": trickle(body)}) as srv:
        for kind in ("mirror", "s3"):
            s, where = both_stores(srv, kind)
            with pytest.raises(StoreError) as exc:
                b"".join(s.read_range(key, size=len(body)))
            assert str(exc.value).startswith(f"{where}/{key}: ")
            said[kind] = str(exc.value).removeprefix(f"{where}/{key}: ")
    assert said["s3"] == ("not complete after 0 s (the limit for 40 bytes: 0 s plus 32768 bytes per second): the "
                          "store is too slow; try again later")
    assert said["mirror"] == said["s3"].replace("the store", "the mirror") + " or another mirror"


@pytest.mark.parametrize("kind", ["mirror", "s3"])
def test_the_deadline_leaves_out_the_readers_own_time_between_blocks(store, tmp_path, kind):
    """A fast server read by a slow consumer (it writes and hashes each block) is not given up: the deadline
    counts the time spent waiting for the server, here well under it, not the consumer's 0.8 s between blocks."""
    key = f"releases/{V2}/croissant.json"
    data = (store.root / key).read_bytes()
    (tmp_path / "bucket").mkdir()
    (tmp_path / "bucket" / "lb").symlink_to(store.root, target_is_directory=True)
    with mirror(tmp_path) as srv:
        s, _ = both_stores(srv, kind)
        s.deadline_s = 1
        got = []
        for block in s.read_range(key, chunk=len(data) // 4 + 1, size=len(data)):
            got.append(block)
            time.sleep(0.8)  # the consumer's time: past the whole deadline after 2 blocks
    assert b"".join(got) == data and len(got) >= 4


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


def test_a_redirect_to_a_file_url_is_one_error_without_a_garbled_warning(store):
    import warnings

    from lookbench_pipeline.releases.reader import read_manifest_bytes

    with mirror(None, {f"/releases/{V2}/manifest.json": redirect("file:///etc/passwd")}) as srv:
        with warnings.catch_warnings(record=True) as seen, pytest.raises(StoreError, match="InvalidSchema"):
            warnings.simplefilter("always")
            read_manifest_bytes(HttpStore(srv.base_url), V2, exists=True)
    assert not [w for w in seen if "redirects to another host" in str(w.message)], [str(w.message) for w in seen]


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
    capsys.readouterr()
    # the folder is whole: the subsets not pulled are "not pulled", never missing files of a damaged folder
    folder = str(tmp_path / "d" / V2)
    assert main(["info", folder]) == 0
    out, err = capsys.readouterr()
    assert "pull it again" not in out + err and "real_streetlook/query.parquet" not in err
    code = main(["evaluate", "--release", folder, "--model", "baseline/hsv-hog-v1", "--quiet",
                 "--cache", str(tmp_path / "c")])
    out, err = capsys.readouterr()
    assert code == 0 and "damaged" not in err and "baseline/hsv-hog-v1  overall" in out
    # evaluate reads pull's record as info does: the pulled subset's files all gone is damage, not "not pulled"
    for f in (tmp_path / "d" / V2 / "real_studio_flat").iterdir():
        f.unlink()
    assert main(["evaluate", "--release", folder, "--model", "baseline/hsv-hog-v1", "--quiet",
                 "--cache", str(tmp_path / "c")]) == 1
    assert "real_studio_flat/gallery.parquet" in capsys.readouterr().err


def test_the_subsets_pulled_are_recorded_and_kept_across_pulls(store, tmp_path):
    from lookbench_pipeline.releases.reader import folder_gaps, read_pulled

    pull_ = ["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"]
    assert main([*pull_, "--subset", "real_studio_flat"]) == 0
    out = tmp_path / "d" / V2
    assert read_pulled(out) == ["real_studio_flat"]
    assert main([*pull_, "--subset", "real_streetlook"]) == 0
    assert read_pulled(out) == ["real_streetlook", "real_studio_flat"]
    assert not list(out.glob("*.part"))
    from lookbench_pipeline.store import ReleaseFolder

    assert not any(k.endswith(".pulled.json") for k in ReleaseFolder(out).list())
    # the record comes first: a subset it names whose files are all gone is damage, not "not pulled"
    m = json.loads((out / "manifest.json").read_bytes())
    present = {k for k in m["files"] if not k.startswith("real_streetlook/")} | set(m["metadata_files"])
    not_pulled, gone = folder_gaps(m, present, None, read_pulled(out))
    assert "real_streetlook" not in not_pulled and "real_streetlook/query.parquet" in gone
    # without it, a card that cannot be read: a subset with none of its files was not pulled
    assert folder_gaps(m, present, b"no front matter", None)[0] == ["real_streetlook"]


def test_a_manifest_cannot_name_the_pull_record(store):
    from lookbench_pipeline.releases.reader import check_manifest

    m = json.loads(store.get_bytes(f"releases/{V2}/manifest.json"))
    m["metadata_files"][".pulled.json"] = dict(m["metadata_files"]["README.md"])
    with pytest.raises(ReleaseIntegrityError, match="records the subsets"):
        check_manifest(m, V2, "here")


def test_folder_gaps_and_limit_card_read_the_card_alike():
    from lookbench_pipeline.releases.reader import card_config_names, limit_card

    card = "---\nconfigs:\n- config_name: real_studio_flat\n- config_name: real_streetlook\n- {}\n---\n# x\n"
    assert card_config_names(card) == ["real_studio_flat", "real_streetlook"]
    assert card_config_names(limit_card(card, ["real_streetlook"])) == ["real_streetlook"]
    with pytest.raises(ValueError, match="no YAML front matter"):
        card_config_names("# x\n")


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
    # the lock file stays (removing it would let two later pulls hold two different files' locks at once)
    assert (out / "manifest.json").is_file() and (out / ".pull.lock").is_file()
    with pytest.raises(ValueError, match="another pull is writing"):
        fd = os.open(out / ".pull.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            pull(store, V2, tmp_path / "d", progress=False)
        finally:
            os.close(fd)


def test_a_file_system_that_cannot_lock_pulls_with_a_warning(store, tmp_path, monkeypatch):
    import errno
    import fcntl

    from lookbench_pipeline.releases import pull

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    said: list[str] = []
    pull(store, V2, tmp_path / "d", progress=False, warn=said.append)
    assert (tmp_path / "d" / V2 / "manifest.json").is_file()
    assert len(said) == 1 and "cannot be locked (No locks available)" in said[0]


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


# review of the store: abandoned requests, a 200 to a resumed request, file:// URLs, read_range, read_file's memory

class _Raw:
    def __init__(self, body: bytes, pause: float = 0.0):
        self.body, self.pause = body, pause

    def read1(self, n: int, decode_content: bool = True) -> bytes:
        time.sleep(self.pause)
        block, self.body = self.body[:n], self.body[n:]
        return block


class _Response:
    def __init__(self, status: int, body: bytes, pause: float = 0.0):
        self.status_code, self.raw, self.closed = status, _Raw(body, pause), False
        self.headers = {"Content-Length": str(len(body))}

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_a_response_that_comes_after_the_header_deadline_is_closed():
    late = _Response(200, b"x")
    s = HttpStore("http://127.0.0.1:9", deadline_s=0.05)
    s.session.request = lambda *a, **k: (time.sleep(0.3), late)[1]
    with pytest.raises(StoreError, match="no complete answer"):
        s.get_bytes("releases/latest")
    for t in threading.enumerate():
        if t.name == "lookbench-mirror-get":
            t.join(5)
    assert late.closed, "the abandoned request's response (and its socket) is released"


def test_a_resume_answered_200_sets_the_deadline_by_the_whole_body():
    body = b"y" * 100
    s = HttpStore("http://127.0.0.1:9", deadline_s=0, min_bytes_per_s=1e9)
    s.session.request = lambda *a, **k: _Response(200, body, pause=0.01)
    with pytest.raises(StoreError, match=r"the limit for 100 bytes"):
        b"".join(s.read_range("releases/x", start=40, size=100))


def ranged(body: bytes) -> Answer:
    """A server that honours ``Range: bytes=N-`` (206 with ``Content-Range``), else answers 200 with ``body``."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        rng = h.headers.get("Range", "")
        start = int(rng[len("bytes="):].rstrip("-")) if rng.startswith("bytes=") else 0
        h.send_response(206 if start else 200)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        h.send_header("Content-Length", str(len(body) - start))
        h.end_headers()
        h.wfile.write(body[start:])
    return answer


def ranged_without_content_range(body: bytes) -> Answer:
    """A 206 to ``Range: bytes=N-`` that names no ``Content-Range`` (the status alone says it is ranged)."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        rng = h.headers.get("Range", "")
        start = int(rng[len("bytes="):].rstrip("-")) if rng.startswith("bytes=") else 0
        h.send_response(206 if start else 200)
        h.send_header("Content-Length", str(len(body) - start))
        h.end_headers()
        h.wfile.write(body[start:])
    return answer


@pytest.mark.parametrize("kind", ["mirror", "s3"])
@pytest.mark.parametrize("honours_range", [True, False, "no Content-Range"])
def test_a_resumed_read_gets_the_bytes_after_its_offset_whether_or_not_the_server_honours_range(kind,
                                                                                               honours_range):
    """A resumed download asks for ``bytes=40-``: a server that honours it sends them (206); one that ignores it
    (some static hosts and S3-compatible stores) sends the whole object (200), whose first 40 bytes both stores
    skip, so the resumed file is not written twice over; a 206 is ranged whether or not it names its range."""
    body = bytes(range(256)) * 3
    key = "releases/v20260701/x.parquet"
    answer = {True: ranged, False: lambda b: announcing(len(b), b),
              "no Content-Range": ranged_without_content_range}[honours_range](body)
    with mirror(None, {f"/bucket/lb/{key}": answer}) as srv:
        s, _ = both_stores(srv, kind)
        assert b"".join(s.read_range(key, start=40, chunk=64, size=len(body))) == body[40:]
        assert b"".join(s.read_range(key, start=0, chunk=64, size=len(body))) == body


def test_a_relative_file_url_says_how_to_write_one():
    from lookbench_pipeline.store import BadStoreURL, open_store

    with pytest.raises(BadStoreURL, match=r"reads 'relative' as a host.*file:///ABSOLUTE/PATH, or the folder as a "):
        open_store("file://relative/path")


def test_every_store_read_range_takes_the_expected_size(tmp_path):
    s = LocalStore(tmp_path / "s")
    s.put_bytes("a/b", b"0123456789")
    assert b"".join(s.read_range("a/b", 2, 4, size=10)) == b"23456789"


def test_read_file_holds_one_copy_of_the_file(tmp_path):
    """Measured in a fresh interpreter: tracemalloc in the test process can crash it (tests/fresh_interpreter.py)."""
    import fresh_interpreter

    rows, peak, size = fresh_interpreter.call("test_store_hostile", "read_file_peak", str(tmp_path))
    assert rows == 16
    assert peak < 1.6 * size, f"peak {peak} bytes for a file of {size}"


def read_file_peak(tmp: str) -> tuple[int, int, int]:
    """Rows read, tracemalloc's peak (bytes) while ``read_file`` reads a 16 MiB Parquet file, the file's size."""
    import hashlib
    import os
    import tracemalloc

    import pyarrow as pa
    import pyarrow.parquet as pq

    from lookbench_pipeline.releases.reader import read_file

    tmp_path = Path(tmp)
    s = LocalStore(tmp_path / "s")
    pq.write_table(pa.table({"b": [os.urandom(1 << 20) for _ in range(16)]}), tmp_path / "f.parquet",
                   compression="none")
    data = (tmp_path / "f.parquet").read_bytes()
    s.put_bytes(f"releases/{V2}/sub/query.parquet", data)
    m = {"files": {"sub/query.parquet": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}}
    tracemalloc.start()
    try:
        table = read_file(s, V2, "sub", "query", manifest=m)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return table.num_rows, peak, len(data)
