"""Reading a researcher's embeddings files: every damaged file is an EmbeddingsError naming it, a header that
declares more than its file holds is refused before anything is allocated, an ids file is read one id per line,
and normalisation keeps its exact results without a float64 copy of the whole matrix."""

from __future__ import annotations

import struct
import zipfile

import numpy as np
import pytest

from lookbench_pipeline import scoring
from lookbench_pipeline.scoring import EmbeddingsError, IdsFileError, PrecomputedEmbeddings, _unit

IDS = [f"{i:016x}" for i in range(6)]


def _vecs(n: int = 6, d: int = 4) -> np.ndarray:
    return np.arange(1, n * d + 1, dtype=np.float32).reshape(n, d)


def _npy_header(shape: tuple, descr: str = "<f4") -> bytes:
    """A .npy 1.0 header declaring ``shape`` (no data follows)."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".encode()
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


@pytest.mark.parametrize("suffix", [".npz", ".npy"])
def test_an_empty_file_is_refused_naming_it(tmp_path, suffix):
    path = tmp_path / f"empty{suffix}"
    path.write_bytes(b"")
    (tmp_path / "ids.txt").write_text("\n".join(IDS) + "\n")
    ids = tmp_path / "ids.txt" if suffix == ".npy" else None
    with pytest.raises(EmbeddingsError, match=f"{path}: not a readable"):
        PrecomputedEmbeddings.load([path], ids)


def test_a_truncated_npy_is_refused_naming_it(tmp_path):
    np.save(tmp_path / "v.npy", _vecs())
    data = (tmp_path / "v.npy").read_bytes()
    (tmp_path / "v.npy").write_bytes(data[:-5])
    (tmp_path / "ids.txt").write_text("\n".join(IDS) + "\n")
    with pytest.raises(EmbeddingsError, match=r"v\.npy: the header declares shape \(6, 4\) .* more than the 91 bytes"):
        PrecomputedEmbeddings.load([tmp_path / "v.npy"], tmp_path / "ids.txt")


def test_a_npy_header_claiming_terabytes_is_refused_before_allocating(tmp_path, monkeypatch):
    path = tmp_path / "huge.npy"
    path.write_bytes(_npy_header((10_000_000, 100_000)))
    (tmp_path / "ids.txt").write_text("\n".join(IDS) + "\n")

    def no_load(*a, **k):
        raise AssertionError("the data was read")

    monkeypatch.setattr(np, "load", no_load)
    with pytest.raises(EmbeddingsError, match=r"huge\.npy: the header declares shape \(10000000, 100000\) of "
                                              r"float32 \(4000000000000 bytes\), more than the 0 bytes"):
        PrecomputedEmbeddings.load([path], tmp_path / "ids.txt")


def test_a_truncated_npz_is_refused_naming_it(tmp_path):
    np.savez(tmp_path / "v.npz", sample_id=np.array(IDS), embedding=_vecs())
    data = (tmp_path / "v.npz").read_bytes()
    (tmp_path / "v.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(EmbeddingsError, match=r"v\.npz: not a readable \.npz file"):
        PrecomputedEmbeddings.load([tmp_path / "v.npz"])


def test_a_npz_member_declaring_more_than_it_holds_is_refused_before_reading(tmp_path):
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("sample_id.npy", _npy_header((6,), "<U16") + b"\0" * 6 * 64)
        zf.writestr("embedding.npy", _npy_header((10_000_000, 100_000)) + b"\0" * 16)
    with pytest.raises(EmbeddingsError, match=r"lie\.npz \(array embedding\): the header declares shape "
                                              r"\(10000000, 100000\) .* more than the 16 bytes the member holds"):
        PrecomputedEmbeddings.load([path])


def test_a_deflated_npz_bomb_is_refused_before_decompressing(tmp_path, monkeypatch):
    monkeypatch.setattr(scoring, "NPZ_RATIO_FLOOR", 1 << 16)  # the rule, on a small file
    path = tmp_path / "bomb.npz"
    ids = np.array([f"{i:016x}" for i in range(60_000)])  # unique ids compress about 10 times
    np.savez_compressed(path, sample_id=ids, embedding=np.zeros((60_000, 16), np.float32))
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("decompressed"))
    with pytest.raises(EmbeddingsError, match=r"bomb\.npz \(array embedding\): shape \(60000, 16\) .* more than "
                                              r"100 times, not embeddings"):
        PrecomputedEmbeddings.load([path])


def test_a_compressed_npz_of_real_vectors_is_read(tmp_path):
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((6, 8)).astype(np.float32)
    np.savez_compressed(tmp_path / "ok.npz", sample_id=np.array(IDS), embedding=vecs)
    emb = PrecomputedEmbeddings.load([tmp_path / "ok.npz"])
    assert emb.vectors.shape == (6, 8) and emb.vectors.dtype == np.float32


def test_a_nan_across_several_files_is_blamed_on_the_file_that_holds_it(tmp_path):
    good, bad = _vecs(3), _vecs(3)
    bad[1, 0] = np.nan
    for name, ids, v in (("mine.npz", IDS[:3], good), ("nan.npz", IDS[3:], bad)):
        np.savez(tmp_path / name, sample_id=np.array(ids), embedding=v)
    with pytest.raises(EmbeddingsError) as e:
        PrecomputedEmbeddings.load([tmp_path / "mine.npz", tmp_path / "nan.npz"])
    assert str(e.value).startswith(f"{tmp_path / 'nan.npz'}: sample_id '{IDS[4]}': the vector has a NaN")
    assert "mine.npz" not in str(e.value)


def _load_npy_with_ids(tmp_path, text: str | bytes, n: int = 6) -> list[str]:
    np.save(tmp_path / "v.npy", _vecs(n))
    ids = tmp_path / "ids.txt"
    ids.write_bytes(text if isinstance(text, bytes) else text.encode())
    emb = PrecomputedEmbeddings.load([tmp_path / "v.npy"], ids)
    return list(emb.index)


def test_an_ids_file_is_one_id_per_line(tmp_path):
    assert _load_npy_with_ids(tmp_path, b"\xef\xbb\xbf" + "\n".join(IDS).encode() + b"\n") == IDS, "BOM dropped"
    assert _load_npy_with_ids(tmp_path, "\r\n".join(IDS) + "\r\n") == IDS, "CRLF"
    assert _load_npy_with_ids(tmp_path, "\n".join(IDS)) == IDS, "no final line ending"
    assert _load_npy_with_ids(tmp_path, "\n".join(IDS) + "\n\n\n") == IDS, "blank lines at the end"
    spaced = ["a b", *IDS[1:]]
    assert _load_npy_with_ids(tmp_path, "\n".join(spaced) + "\n") == spaced, "an inner space is part of the id"
    padded = [f" {IDS[0]}\t", *(f"{i}  " for i in IDS[1:])]  # as a spreadsheet or `paste` leaves them
    assert _load_npy_with_ids(tmp_path, "\n".join(padded) + "\n") == IDS, "spaces and tabs around an id dropped"


def test_a_blank_line_before_an_id_is_refused_naming_it(tmp_path):
    with pytest.raises(EmbeddingsError, match=r"ids\.txt: line 3 is blank"):
        _load_npy_with_ids(tmp_path, "\n".join(IDS[:2]) + "\n\n" + "\n".join(IDS[2:]) + "\n")


def test_too_many_ids_are_refused_without_reading_the_rest(tmp_path, monkeypatch):
    with pytest.raises(EmbeddingsError, match=r"ids\.txt: more than 6 ids for the 6 rows of .*v\.npy \(line 7"):
        _load_npy_with_ids(tmp_path, "\n".join(IDS + ["x"] * 1000) + "\n")
    with pytest.raises(EmbeddingsError, match=r"ids\.txt: 5 ids for the 6 rows"):
        _load_npy_with_ids(tmp_path, "\n".join(IDS[:5]) + "\n")
    with pytest.raises(EmbeddingsError, match=r"ids\.txt: line 1 is longer than 1000 characters"):
        _load_npy_with_ids(tmp_path, "x" * 5000)


def test_a_missing_ids_file_is_an_ids_file_error(tmp_path):
    np.save(tmp_path / "v.npy", _vecs())
    with pytest.raises(IdsFileError, match="absent.txt: no such file"):
        PrecomputedEmbeddings.load([tmp_path / "v.npy"], tmp_path / "absent.txt")


def test_normalisation_keeps_its_results_works_in_chunks_and_leaves_the_input_alone(monkeypatch):
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((50, 7)).astype(np.float32)
    vecs[::3] /= np.linalg.norm(vecs[::3].astype(np.float64), axis=1)[:, None].astype(np.float32)
    before = vecs.copy()
    norms = np.linalg.norm(vecs.astype(np.float64), axis=1)  # the former whole-matrix rule, for comparison
    want = vecs.copy()
    off = np.abs(norms - 1.0) > scoring.UNIT_TOLERANCE
    want[off] = (vecs[off].astype(np.float64) / norms[off, None]).astype(np.float32)
    monkeypatch.setattr(scoring, "_CHUNK_ROWS", 8)
    out = _unit(vecs, lambda i: f"row {i}")
    assert np.array_equal(out, want) and out.dtype == np.float32
    assert np.array_equal(vecs, before), "the caller's array is not written to"
    assert np.array_equal(out[::3], before[::3]), "unit vectors are kept as given"
    vecs[20] = 0.0
    vecs[45, 1] = np.inf
    with pytest.raises(EmbeddingsError, match="row 45: the vector has a NaN"):
        _unit(vecs, lambda i: f"row {i}")  # not finite is checked before all zeros, in any chunk
    vecs[45, 1] = 1.0
    with pytest.raises(EmbeddingsError, match="row 20: the vector is all zeros"):
        _unit(vecs, lambda i: f"row {i}")


def _peak_bytes(fn) -> int:
    """The most memory ``fn()`` held at once, as tracemalloc counts it (NumPy reports its arrays to it)."""
    import tracemalloc

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def normalisation_peaks() -> dict[str, int]:
    """tracemalloc's peaks (bytes) of ``_unit`` on a 20,000 × 64 float32 matrix, 256-row chunks, and its size."""
    scoring._CHUNK_ROWS = 256  # this process only (a fresh interpreter)
    vecs = np.random.default_rng(2).standard_normal((20_000, 64)).astype(np.float32)  # 5 MB, no row of unit norm
    mine = vecs.copy()
    return {"nbytes": int(vecs.nbytes), "callers": _peak_bytes(lambda: _unit(vecs, str)),
            "given_copy": _peak_bytes(lambda: _unit(vecs.copy(), str, owned=True)),
            "given": _peak_bytes(lambda: _unit(mine, str, owned=True))}


def test_normalisation_makes_no_float64_copy_of_the_whole_matrix():
    """Measured in a fresh interpreter: tracemalloc in the test process can crash it (tests/fresh_interpreter.py)."""
    import fresh_interpreter

    peaks = fresh_interpreter.call("test_embeddings_files", "normalisation_peaks")
    n = peaks["nbytes"]
    # the caller's array: one float32 copy to normalise, float64 only a chunk at a time (a whole float64 copy
    # alone would be twice the input)
    assert peaks["callers"] < 1.5 * n
    # an array the caller gave away (a file just read) is normalised in place
    assert peaks["given_copy"] < 2.5 * n  # the copy itself is 1x
    assert peaks["given"] < 0.25 * n


def test_the_constructor_keeps_no_reference_to_the_callers_array():
    vecs = np.eye(6, 4, dtype=np.float32)
    vecs[4:, 0] = 1.0  # unit vectors, used as given
    emb = PrecomputedEmbeddings(IDS, vecs, "m")
    vecs[:] = 7.0
    assert emb.vectors[0, 0] == 1.0
