"""What a researcher's commands do with a release someone else controls and with mistyped arguments: a release
whose manifest was rewritten to match a tampered table (a mirror) is checked against the published schema before
it is scored (exit 1 naming file, column, row / sample_id); an unknown ``evaluate --subset``, a ``--store`` of a
scheme no store has and a missing ``audit score`` file are usage errors (exit 2); ``audit export`` reads a release
as ``info`` and ``evaluate`` do, in the consumer install."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from consumer_release import V, store  # noqa: F401 (fixture)

from lookbench_pipeline.cli import main
from lookbench_pipeline.releases import ReleaseIntegrityError
from lookbench_pipeline.store import LocalStore

QUERY = "real_studio_flat/query.parquet"


def _tamper(store: LocalStore, key: str, edit) -> pa.Table:
    """Rewrite ``key`` of the release with ``edit(table)`` and its manifest entry to match (as a mirror could)."""
    path = store.path(f"releases/{V}/{key}")
    t = edit(pq.read_table(path))
    pq.write_table(t, path)
    mkey = f"releases/{V}/manifest.json"
    m = json.loads(store.get_bytes(mkey))
    m["files"][key].update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(), bytes=path.stat().st_size)
    store.put_bytes(mkey, json.dumps(m).encode())
    return t


def _set(t: pa.Table, name: str, i: int, value) -> pa.Table:
    values = t[name].to_pylist()
    values[i] = value
    j = t.schema.get_field_index(name)
    return t.set_column(j, t.schema.field(j), pa.array(values, t.schema.field(j).type))


def _sid(t: pa.Table, i: int) -> str:
    return t["sample_id"][i].as_py()


CASES = {
    "a duplicate sample_id on two images": (
        lambda t: _set(t, "sample_id", 1, _sid(t, 0)),
        lambda t: [f"{V}/{QUERY}", "column sample_id", repr(_sid(t, 0)), "rows 0 and 1"]),
    "a query without item_ID": (
        lambda t: _set(t, "item_ID", 2, None),
        lambda t: [f"{V}/{QUERY}", "column item_ID is null or empty in 1 row", f"row 2 (sample_id {_sid(t, 2)!r})"]),
    "a query whose item_ID is empty": (
        lambda t: _set(t, "item_ID", 2, ""),
        lambda t: [f"{V}/{QUERY}", "column item_ID is null or empty in 1 row", f"row 2 (sample_id {_sid(t, 2)!r})"]),
    "a row without sample_id": (
        lambda t: _set(t, "sample_id", 3, None),
        lambda t: [f"{V}/{QUERY}", "column sample_id is null or empty in 1 row", "row 3"]),
    "no item_ID column": (
        lambda t: t.drop(["item_ID"]),
        lambda t: [f"{V}/{QUERY}", "no column item_ID", "docs/schema.json"]),
    "item_ID of another type": (
        lambda t: t.set_column(t.schema.get_field_index("item_ID"), "item_ID",
                               pa.array(range(t.num_rows), pa.int64())),
        lambda t: [f"{V}/{QUERY}", "column item_ID is int64", "has string"]),
    "bytes that are no image": (
        lambda t: _set(t, "image", 4, {"bytes": b"not an image", "path": "x.jpg"}),
        lambda t: [f"{V}/{QUERY}", "column image", f"row 4 (sample_id {_sid(t, 4)!r})", "cannot be decoded"]),
    "a row without image bytes": (
        lambda t: _set(t, "image", 1, None),
        lambda t: [f"{V}/{QUERY}", "column image", f"row 1 (sample_id {_sid(t, 1)!r})", "no image bytes"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_evaluate_checks_the_tables_it_scores_against_the_published_schema(store, tmp_path, capsys, case):
    edit, expected = CASES[case]
    t = _tamper(store, QUERY, edit)
    args = ["evaluate", "--release", V, "--store", str(store.root), "--model", "baseline/hsv-hog-v1", "--quiet",
            "--cache", str(tmp_path / "cache")]
    assert main(args) == 1, "a malformed release is a data error"
    out, err = capsys.readouterr()
    assert "overall" not in out, "nothing is scored"
    for part in expected(t):
        assert part in err, (part, err)
    assert "<_io.BytesIO" not in err and "Traceback" not in err and "-- schema metadata --" not in err


def test_a_sample_id_naming_other_images_in_two_files_is_refused(store, tmp_path, capsys):
    gallery = pq.read_table(store.path(f"releases/{V}/real_studio_flat/gallery.parquet"))
    other = _sid(gallery, 0)  # a gallery picture's id given to a query picture (another image_sha256)
    _tamper(store, QUERY, lambda t: _set(t, "sample_id", 0, other))
    assert main(["evaluate", "--release", V, "--store", str(store.root), "--model", "baseline/hsv-hog-v1",
                 "--quiet", "--cache", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err
    assert f"{other!r} names another image" in err and "real_studio_flat/gallery.parquet" in err


def test_the_published_release_passes_and_null_labels_and_dates_are_allowed(store):
    from lookbench_pipeline.releases.reader import check_scored_table

    t = pq.read_table(store.path(f"releases/{V}/{QUERY}"))
    check_scored_table(t, "q")
    check_scored_table(t.drop(["image"]), "q")  # the image column is read when needed, and checked then
    for col in ("category", "attributes", "first_seen_at"):  # no label, or a distractor's unknown first sighting
        check_scored_table(_set(t, col, 0, None), "q")
    with pytest.raises(ReleaseIntegrityError, match="column item_ID is null"):
        check_scored_table(_set(t, "item_ID", 0, None), "q")


def test_a_tampered_release_over_http_is_checked_as_well(store, tmp_path):
    from lookbench_pipeline.demo import serve

    _tamper(store, QUERY, lambda t: t.drop(["item_ID"]))
    with serve.serving(serve.static_resolver(store.root)) as srv:
        proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "evaluate", "--release", V, "--store",
                               srv.base_url, "--model", "baseline/hsv-hog-v1", "--quiet", "--cache",
                               str(tmp_path / "c")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"{V}/{QUERY}: no column item_ID" in proc.stderr


def test_an_unknown_evaluate_subset_is_a_usage_error_like_pull(store, tmp_path, capsys):
    for cmd in (["evaluate", "--release", V, "--model", "baseline/hsv-hog-v1"], ["pull", V]):
        assert main([*cmd, "--store", str(store.root), "--quiet", "--subset", "real_studio_flta",
                     *(["--dest", str(tmp_path / "d")] if cmd[0] == "pull" else [])]) == 2, cmd
        err = capsys.readouterr().err
        assert f"error: {V} has no subset 'real_studio_flta' (did you mean real_studio_flat?)" in err, err


@pytest.mark.parametrize("cmd", [["releases"], ["info", "latest"], ["pull", "latest"],
                                 ["evaluate", "--release", "latest"], ["audit", "export", "latest", "--out", "a"]])
def test_a_store_url_of_an_unsupported_scheme_is_a_usage_error(cmd, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*cmd, "--store", "ftp://x/y"]) == 2
    err = capsys.readouterr().err
    assert "unsupported store URL scheme 'ftp://'" in err and "s3://bucket/prefix" in err and "https://" in err
    assert not (tmp_path / "ftp:").exists()


def test_audit_export_takes_the_release_as_info_does_in_the_consumer_install(store, tmp_path, capsys):
    pulled = tmp_path / "rel"
    assert main(["pull", "latest", "--store", str(store.root), "--dest", str(pulled), "--quiet"]) == 0
    for release, extra in (("latest", ["--store", str(store.root)]), (V, ["--store", str(store.root)]),
                           (str(pulled / V), [])):
        out = tmp_path / f"aud{len(extra)}{release[-3:]}"
        assert main(["audit", "export", release, "--out", str(out), "--per-stratum", "2", *extra]) == 0, release
        assert (out / "audit.csv").is_file() and f"of {V}:" in capsys.readouterr().out
    # the researcher install has no w3lib (nor the rest of the build stack): audit export does not need it
    code = ("import sys; sys.modules.update(dict.fromkeys(['w3lib', 'scrapy', 'dagster'])); "
            "from lookbench_pipeline.cli import main; "
            f"sys.exit(main(['audit', 'export', 'latest', '--store', {str(store.root)!r}, '--out', 'aud']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "aud" / "audit.csv").is_file()


def test_audit_score_of_a_missing_file_is_a_usage_error(tmp_path, capsys):
    assert main(["audit", "score", str(tmp_path / "nonexistent.csv")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nonexistent.csv'}: no such file" in err and "Errno" not in err
    assert main(["audit", "score", str(tmp_path)]) == 2
    assert "not a file" in capsys.readouterr().err


def test_info_prints_the_manifests_sha256_the_root_of_trust_of_a_copy(store, tmp_path, capsys):
    """The schema checks refuse malformed files, but cannot tell an image swapped for another when its table and
    the manifest were rewritten to match (``image_sha256`` is the original picture's digest, not the published
    JPEG's). The manifest is the root of trust: ``info`` prints its sha256, the same for the store and a pulled
    copy, and another for a tampered one."""
    import hashlib

    want = hashlib.sha256(store.get_bytes(f"releases/{V}/manifest.json")).hexdigest()
    assert main(["info", V, "--store", str(store.root)]) == 0
    assert f"manifest sha256: {want}" in capsys.readouterr().out
    pulled = tmp_path / "pulled"
    assert main(["pull", V, "--store", str(store.root), "--dest", str(pulled), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", str(pulled / V)]) == 0
    assert f"manifest sha256: {want}" in capsys.readouterr().out
    # the scores name the same digest: on the terminal and in the report's evaluation.json
    assert main(["evaluate", str(pulled / V), "--model", "baseline/hsv-hog-v1", "--quiet", "--cache",
                 str(tmp_path / "c"), "--report", str(tmp_path / "r")]) == 0
    assert f"scored on {V}, manifest sha256 {want}" in capsys.readouterr().out
    assert json.loads((tmp_path / "r" / "evaluation.json").read_text())["manifest_sha256"] == want
    _tamper(store, QUERY, lambda t: t)  # rewritten, as a mirror could: the manifest's bytes change
    assert main(["info", V, "--store", str(store.root)]) == 0
    assert f"manifest sha256: {want}" not in capsys.readouterr().out


@pytest.mark.parametrize("case", list(CASES))
def test_audit_export_checks_the_tables_it_reads_as_evaluate_does(store, tmp_path, capsys, case):
    """``audit export`` reads the same files from a store or mirror someone else controls: a table that is not the
    published schema, or a picture it would export without bytes or undecodable, is an error naming the file,
    column and row (exit 1), not a KeyError or a broken picture in the reviewers' form."""
    edit, expected = CASES[case]
    key = "real_studio_flat/gallery.parquet" if "image" in case else QUERY  # the gallery's pictures are exported
    t = _tamper(store, key, edit)
    out = tmp_path / "audit"
    assert main(["audit", "export", V, "--store", str(store.root), "--out", str(out), "--per-stratum", "100"]) == 1
    err = capsys.readouterr().err
    for part in expected(t):
        assert part.replace(QUERY, key) in err, (part, err)
    assert "Traceback" not in err and "KeyError" not in err and not (out / "audit.csv").exists()


def test_the_python_api_names_an_undecodable_image_as_the_cli_does(store, tmp_path):
    import lookbench_pipeline

    t = _tamper(store, QUERY, CASES["bytes that are no image"][0])
    assert main(["pull", V, "--store", str(store.root), "--dest", str(tmp_path / "rel"), "--quiet"]) == 0
    with pytest.raises(ReleaseIntegrityError) as e:
        lookbench_pipeline.score(tmp_path / "rel" / V, lambda ims: [[1.0, 0.0]] * len(ims))
    for part in [QUERY, "column image", f"row 4 (sample_id {_sid(t, 4)!r})", "cannot be decoded"]:
        assert part in str(e.value), (part, str(e.value))
