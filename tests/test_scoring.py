"""Scoring your own model on a pulled release: `lookbench evaluate DIR --embeddings …` and
`lookbench_pipeline.score(DIR, embed_fn)` give the same scores as the evaluation of a registry model in the store,
through the same metrics, cutoff and noise gallery; the site's benchmark.json shape."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from release_factory import export_embeddings, make_release, with_noise

import lookbench_pipeline
from lookbench_pipeline.cli import main
from lookbench_pipeline.embed import HsvHogEmbedder
from lookbench_pipeline.evaluate import run_evaluation
from lookbench_pipeline.releases import pull
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.scoring import EmbeddingsError, NothingScoredError, site_benchmark
from lookbench_pipeline.store import LocalStore

V = "v20260701"
BASELINE = "baseline/hsv-hog-v1"
COMPARED = ["model", "subset", "metric", "value", "ci_low", "ci_high", "n_queries", "cutoff"]


@pytest.fixture(scope="module")
def pulled(tmp_path_factory):
    """A release with a noise gallery published in a store, pulled to a folder; the baseline's in-store scores."""
    root = tmp_path_factory.mktemp("scoring")
    store = LocalStore(root / "store")
    publish(with_noise(make_release(V, range(0, 12))), store, {})
    pull(store, V, root / "rel", progress=False)
    ev = run_evaluation(store, V, [BASELINE], root / "cache", n_examples=0)
    return {"root": root, "store": store, "folder": root / "rel" / V, "scores": ev.scores}


def _same_scores(a: pa.Table, b: pa.Table, name: str) -> None:
    rows_a = sorted(tuple(r[c] for c in COMPARED[1:]) for r in a.select(COMPARED).to_pylist())
    rows_b = sorted(tuple(r[c] for c in COMPARED[1:]) for r in b.select(COMPARED).to_pylist() if r["model"] == name)
    assert rows_a == rows_b and rows_a


def test_embeddings_of_the_pulled_folder_score_as_the_in_store_evaluation(pulled, tmp_path, capsys):
    assert any(r["metric"] == "distractor@1" for r in pulled["scores"].to_pylist()), "the noise gallery is scored"
    for fmt, suffix in (("parquet", ".parquet"), ("npz", ".npz"), ("npy", ".npy")):
        path = tmp_path / f"mine{suffix}"
        export_embeddings(pulled["folder"], path, fmt)
        extra = ["--ids", str(path.with_suffix(".ids.txt"))] if fmt == "npy" else []
        out = tmp_path / f"scores-{fmt}.parquet"
        assert main(["evaluate", str(pulled["folder"]), "--embeddings", str(path), *extra, "--name", "mine",
                     "--quiet", "--output", str(out), "--cache", str(tmp_path / "c")]) == 0, capsys.readouterr().err
        capsys.readouterr()
        mine = pq.read_table(out)
        _same_scores(pulled["scores"].filter(pa.compute.equal(pulled["scores"]["model"], BASELINE)), mine, "mine")
        assert set(mine.column("model").to_pylist()) == {"mine"}, "named embeddings are scored alone"


def test_embeddings_with_a_cutoff_and_one_subset(pulled, tmp_path, capsys):
    path = tmp_path / "mine.parquet"
    export_embeddings(pulled["folder"], path)
    cut = "2026-02-06"
    ref = run_evaluation(pulled["store"], V, [BASELINE], pulled["root"] / "cache", cutoff=cut, n_examples=0,
                         subsets=["real_studio_flat"]).scores
    out = tmp_path / "s.parquet"
    assert main(["evaluate", str(pulled["folder"]), "--embeddings", str(path), "--name", "mine", "--cutoff", cut,
                 "--subset", "real_studio_flat", "--quiet", "--output", str(out)]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err  # the street-look queries' vectors were not asked for
    assert "are not in the subsets scored (real_studio_flat) and were not used" in err and "another" not in err
    mine = pq.read_table(out)
    _same_scores(ref, mine, "mine")
    assert set(mine.column("subset").to_pylist()) == {"real_studio_flat", "overall"}
    assert {r["n_queries"] for r in mine.to_pylist()} == {7}, "queries first seen before the cutoff are left out"
    # a cutoff after every query: nothing scored, exit 1 with the reason
    assert main(["evaluate", str(pulled["folder"]), "--embeddings", str(path), "--cutoff", "2031-01-01",
                 "--quiet"]) == 1
    assert "nothing was scored" in capsys.readouterr().err


def test_the_python_api_scores_a_function_as_the_registry_model(pulled):
    emb = HsvHogEmbedder()
    calls = []

    def embed(images):
        calls.append(len(images))
        return emb.embed(images)

    ev = lookbench_pipeline.score(pulled["folder"], embed, name="fn", batch_size=7)
    _same_scores(pulled["scores"].filter(pa.compute.equal(pulled["scores"]["model"], BASELINE)), ev.scores, "fn")
    distinct = 12 + 12 + 4 + 5  # gallery (shared by both subsets' galleries), studio and street queries, noise
    assert sum(calls) == distinct and max(calls) <= 7, "each distinct row is embedded once, in batches"
    with pytest.raises(NothingScoredError, match="first seen on or after the cutoff 2031-01-01"):
        lookbench_pipeline.score(pulled["folder"], embed, cutoff="2031-01-01")
    # an unnormalised output is normalised (the cosine); the scores do not change
    ev2 = lookbench_pipeline.score(pulled["folder"], lambda ims: 3.0 * emb.embed(ims), name="fn")
    assert ev2.scores.column("value").to_pylist() == pytest.approx(ev.scores.column("value").to_pylist())


def test_a_function_that_reuses_one_output_buffer_scores_as_one_that_does_not(pulled):
    """embed_fn may return the same array every call (a preallocated buffer, a framework's reused output), already
    float32 unit vectors so nothing needs converting: the vectors of earlier batches are kept, not the buffer."""
    emb, buf = HsvHogEmbedder(), []

    def embed(images):
        v = np.asarray(emb.embed(images), np.float64)
        v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
        if not buf:
            buf.append(np.empty((7, v.shape[1]), np.float32))
        out = buf[0][: len(images)]
        out[:] = v
        return out

    ev = lookbench_pipeline.score(pulled["folder"], embed, name="fn", batch_size=7)
    _same_scores(pulled["scores"].filter(pa.compute.equal(pulled["scores"]["model"], BASELINE)), ev.scores, "fn")


@pytest.mark.parametrize("damage,match", [
    (lambda ids, v: (ids[:-1], v[:-1]), "have no embedding"),
    (lambda ids, v: (ids + ids[:1], np.concatenate([v, v[1:2]])), "given twice with different vectors"),
    (lambda ids, v: (ids, np.where(np.arange(len(v))[:, None] == 3, np.nan, v)), "NaN or infinite"),
    (lambda ids, v: (ids, np.where(np.arange(len(v))[:, None] == 2, 0.0, v)), "all zeros"),
])
def test_embeddings_that_cannot_be_scored_are_refused(pulled, tmp_path, capsys, damage, match):
    ids, vecs = export_embeddings(pulled["folder"], tmp_path / "ok.parquet")
    ids, vecs = damage(list(ids), vecs)
    np.savez(tmp_path / "bad.npz", sample_id=np.array(ids), embedding=vecs.astype(np.float32))
    with pytest.raises(EmbeddingsError, match=match):
        lookbench_pipeline.score(pulled["folder"], embeddings=tmp_path / "bad.npz")
    assert main(["evaluate", str(pulled["folder"]), "--embeddings", str(tmp_path / "bad.npz"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_an_id_given_twice_is_refused_unless_both_vectors_are_the_same_as_given(pulled, tmp_path, capsys):
    """v and 2v are one direction, so one cosine, but two vectors as given: which one the researcher meant is not
    ours to guess, in one file or across two. The same vector twice (the same rows exported twice) is fine. (The
    vectors are of norm 2 and 4, so both are normalised, to the same bits.)"""
    from lookbench_pipeline.scoring import PrecomputedEmbeddings

    ids, unit = export_embeddings(pulled["folder"], tmp_path / "unit.parquet")
    sid, vecs = ids[0], 2 * unit

    def save(name, sample_ids, rows):
        np.savez(tmp_path / name, sample_id=np.array(sample_ids), embedding=np.asarray(rows, np.float32))
        return tmp_path / name

    ok = save("ok.npz", ids, vecs)
    twice = save("twice.npz", [*ids, sid], np.concatenate([vecs, 2 * vecs[:1]]))
    other = save("other.npz", [sid], 2 * vecs[:1])
    for paths in ([twice], [ok, other]):
        with pytest.raises(EmbeddingsError, match=f"sample_id {sid!r} is given twice with different vectors"):
            lookbench_pipeline.score(pulled["folder"], embeddings=paths)
        assert main(["evaluate", str(pulled["folder"]), *[a for f in paths for a in ("--embeddings", str(f))],
                     "--quiet", "--name", "mine"]) == 1
        err = capsys.readouterr().err
        assert f"sample_id {sid!r} is given twice with different vectors" in err and err.count("\n") == 1, err
    with pytest.raises(EmbeddingsError, match=f"sample_id {sid!r} is given twice with different vectors"):
        PrecomputedEmbeddings([sid, sid], np.stack([vecs[0], 2 * vecs[0]]), "mine")
    # the same vector twice, as given: one vector, scored as the file without the repeat
    same = save("same.npz", [*ids, sid], np.concatenate([vecs, vecs[:1]]))
    ref = lookbench_pipeline.score(pulled["folder"], embeddings=ok, name="mine").scores
    for paths in ([same], [ok, ok], [same, save("again.npz", [sid], vecs[:1])]):
        ev = lookbench_pipeline.score(pulled["folder"], embeddings=paths, name="mine")
        assert ev.scores.column("value").to_pylist() == ref.column("value").to_pylist(), paths
    assert PrecomputedEmbeddings([sid, sid], np.stack([vecs[0], vecs[0]]), "mine").vectors.shape[0] == 1


def test_the_python_api_warns_of_embeddings_it_did_not_use(pulled, tmp_path):
    ids, vecs = export_embeddings(pulled["folder"], tmp_path / "ok.parquet")
    np.savez(tmp_path / "more.npz", sample_id=np.array([*ids, "not-in-this-release"]),
             embedding=np.concatenate([vecs, vecs[:1]]).astype(np.float32))
    with pytest.warns(UserWarning, match="1 of the .* sample_ids in .*more.npz are not in .* 'not-in-this-release'"):
        lookbench_pipeline.score(pulled["folder"], embeddings=tmp_path / "more.npz")


def test_benchmark_json_has_the_sites_shape(pulled, tmp_path):
    doc = site_benchmark(pulled["scores"])
    assert list(doc) == ["Real Studio", "Real StreetLook", "Overall"]
    row = doc["Real Studio"][BASELINE]
    # the keys the site's leaderboard script reads (look-bench-page style/js/lookbench-leaderboard.js)
    for fam in ("Coarse Recall", "Fine Recall", "nDCG"):
        assert list(row[fam]) == ["@1", "@5", "@10", "@20"]
    want = {r["metric"]: r["value"] for r in pulled["scores"].to_pylist()
            if r["subset"] == "real_studio_flat" and r["model"] == BASELINE}
    assert row["Fine Recall"]["@10"] == round(100 * want["fine_recall@10"], 2)
    report = tmp_path / "report"
    assert main(["evaluate", str(pulled["folder"]), "--model", BASELINE, "--quiet", "--report", str(report),
                 "--benchmark-json", str(tmp_path / "b.json"), "--cache", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "b.json").read_text()) == json.loads((report / "benchmark.json").read_text()) == doc


def test_a_float64_beyond_float32s_range_is_refused_by_row_without_a_numpy_warning():
    import warnings

    from lookbench_pipeline.scoring import _unit

    vecs = np.ones((3, 4), np.float64)
    vecs[1, 2] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(EmbeddingsError, match="row 1: the vector has a NaN or infinite value .*float32's range"):
            _unit(vecs, lambda i: f"row {i}")


def test_a_damaged_embeddings_file_is_one_line_naming_it_and_a_missing_ids_file_is_usage(pulled, tmp_path, capsys):
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(EmbeddingsError, match=f"{tmp_path / 'empty.npz'}: not a readable .npz file"):
        lookbench_pipeline.score(pulled["folder"], embeddings=tmp_path / "empty.npz")
    base = ["evaluate", str(pulled["folder"]), "--quiet", "--cache", str(tmp_path / "c")]
    assert main([*base, "--embeddings", str(tmp_path / "empty.npz")]) == 1
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'empty.npz'}: not a readable .npz file" in err and err.count("\n") == 1
    export_embeddings(pulled["folder"], tmp_path / "mine.npy", "npy")
    assert main([*base, "--embeddings", str(tmp_path / "mine.npy"), "--ids", str(tmp_path / "absent.txt")]) == 2
    assert f"--ids {tmp_path / 'absent.txt'}: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("content,why", [("[1, 2, 3]", "a JSON list, not an object"),
                                         ('{"k": 1}', "values that are not sha256 strings"),
                                         ("\xff{", "")])
def test_a_damaged_verified_files_cache_is_named_ignored_and_rebuilt(pulled, tmp_path, capsys, content, why):
    cache = tmp_path / "cc"
    cache.mkdir()
    f = cache / "verified_release_files.json"
    f.write_bytes(content.encode("latin-1"))
    assert main(["evaluate", str(pulled["folder"]), "--model", BASELINE, "--quiet", "--cache", str(cache)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {f}: not a cache of verified release files ({why}" in err, err
    assert "ignored; every release file is hashed again" in err
    rebuilt = json.loads(f.read_text())
    assert isinstance(rebuilt, dict) and rebuilt and all(isinstance(v, str) for v in rebuilt.values())


def test_an_ids_file_saved_as_utf16_is_read_and_one_without_its_mark_is_named(pulled, tmp_path, capsys):
    """`--ids` written by Windows PowerShell's `>` or Notepad's "Unicode": UTF-16 with a byte order mark (and
    UTF-32 with one) is read in that encoding and scores as the UTF-8 file; UTF-16 without the mark is an error
    that says so, not "not UTF-8 text after line 0"."""
    ids, _ = export_embeddings(pulled["folder"], tmp_path / "mine.npy", "npy")
    base = ["evaluate", str(pulled["folder"]), "--quiet", "--cache", str(tmp_path / "c"), "--embeddings",
            str(tmp_path / "mine.npy"), "--name", "mine"]
    assert main([*base, "--ids", str(tmp_path / "mine.ids.txt"), "--output", str(tmp_path / "utf8.parquet")]) == 0
    text = "\r\n".join(ids) + "\r\n"
    for codec in ("utf-16", "utf-16-be", "utf-32"):
        data = text.encode(codec)
        if codec == "utf-16-be":
            data = b"\xfe\xff" + data
        (tmp_path / f"{codec}.txt").write_bytes(data)
        capsys.readouterr()
        assert main([*base, "--ids", str(tmp_path / f"{codec}.txt"), "--output",
                     str(tmp_path / f"{codec}.parquet")]) == 0, capsys.readouterr().err
        assert pq.read_table(tmp_path / f"{codec}.parquet").equals(pq.read_table(tmp_path / "utf8.parquet"))
    (tmp_path / "bare.txt").write_bytes(text.encode("utf-16-le"))
    capsys.readouterr()
    assert main([*base, "--ids", str(tmp_path / "bare.txt")]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'bare.txt'}: line 1 holds NUL characters: not UTF-8 text (UTF-16 without a byte order " \
           "mark?): save it as UTF-8" in err, err
    (tmp_path / "broken.txt").write_bytes(b"\xff\xfe" + "ab".encode("utf-16-le") + b"\x00\xd8")  # a lone surrogate
    assert main([*base, "--ids", str(tmp_path / "broken.txt")]) == 1
    err = capsys.readouterr().err
    assert "broken.txt: not UTF-16 text after line 0" in err and "save it as UTF-8" in err, err
