"""Scoring your own model on a release: embeddings computed elsewhere, or a function called on the release's
images, through the same metrics (:mod:`lookbench_pipeline.metrics`), contamination cutoff and noise gallery as
the registry's models (:func:`lookbench_pipeline.evaluate.run_evaluation`).

Precomputed embeddings (``lookbench evaluate RELEASE --embeddings FILE``) are keyed by the release's
``sample_id`` column (16 hex digits; a gallery image that appears in every subset's gallery has one
``sample_id``, so it needs one vector). One file may hold the query, gallery and noise-gallery rows of every
subset, or several files (``--embeddings`` repeated) may split them. Formats:

* Parquet: a ``sample_id`` column (string) and an ``embedding`` column, ``fixed_size_list<float32>[d]`` (a
  ``list<float32>`` or ``list<float64>`` of one length ``d`` is accepted too);
* ``.npz``: arrays ``sample_id`` (strings, shape ``(n,)``) and ``embedding`` (float, shape ``(n, d)``);
* ``.npy``: a float array of shape ``(n, d)``, with ``--ids FILE``: ``n`` sample ids, one per line, in the same
  order.

Vectors are float32 (float16/float64 are converted); vectors of another type (integers, bool, complex) are refused
in every format and from ``embed_fn``, naming the file or the model, as are ``.npz`` sample ids that are not
strings of shape ``(n,)``. Similarity is the cosine: every vector is divided by its L2
norm, except that a vector already of unit norm (within ``UNIT_TOLERANCE``) is used as given, so a model that
normalises its own output is scored bit for bit as the registry scores it. A vector that is not finite or is all
zeros, an id given twice with two different vectors (as given: v and 2v are two, though one cosine; the same
vector twice is kept once), and a scored row with no vector are errors
(:class:`EmbeddingsError`), never silently dropped.

A function (:func:`score` with ``embed_fn``, or :class:`FunctionEmbedder`) gets batches of ``PIL.Image`` objects
decoded from the published bytes as consumers' loaders decode them (``PIL.Image.open``, full size; convert to RGB
yourself if your model needs it) and returns an ``(n, d)`` array; what is kept of it is a copy, so the function may
return the same buffer every call.

:func:`site_benchmark` writes scores in the shape of the LookBench site's ``benchmark.json``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

UNIT_TOLERANCE = 1e-4
"""A vector whose L2 norm is within this of 1 is taken as already normalised (float32 rounding of a normalised
vector is about 1e-7; a model's own normalisation passes, an unnormalised output does not)."""


class EmbeddingsError(ValueError):
    """Embeddings that cannot be scored (the message names the file, the id or the row and why)."""


class EmbeddingsFileError(EmbeddingsError):
    """An embeddings path that names no file, or a file of no known format: a mistaken argument (the CLI's usage
    error, exit 2), not vectors that cannot be scored."""


class NothingScoredError(RuntimeError):
    """An evaluation produced no score (every model skipped, or no query left after the cutoff); the message
    gives each reason."""


_CHUNK_ROWS = 1 << 14
"""Rows per float64 working copy in :func:`_unit` (the norms are computed in float64 a chunk at a time, never on a
float64 copy of the whole matrix)."""


def _not_float(source: str, dtype: object) -> EmbeddingsError:
    """The error for vectors that are not floating point (integers, bool, complex, strings), in every format and
    from ``embed_fn``: one rule (:func:`_unit` owns it; Parquet's reader says it before converting)."""
    return EmbeddingsError(f"{source}: the vectors are {dtype}, expected float (float32; float16 and float64 are "
                           "converted); convert them first, e.g. vectors.astype(numpy.float32)")


def _unit(vecs: np.ndarray, what: Callable[[int], str], *, owned: bool = False, source: str = "embeddings",
          norms_out: list[np.ndarray] | None = None) -> np.ndarray:
    """``vecs`` as float32 unit vectors, shape ``(n, d)`` (see the module docstring). Raises EmbeddingsError naming
    ``source`` (the file, or the model's name) for an array that is not ``(n, d)`` with ``d`` > 0 or not floating
    point (the one rule for the vectors' type: :func:`_not_float`), then naming the row: first any row that is not
    finite, then any row that is all zeros.

    ``owned``: ``vecs`` is the caller's to give (a file just read): rows are normalised in place. Otherwise the
    array given is never written to (a copy is made when a row needs normalising). Memory: a float32 copy when the
    input is of another dtype, and float64 working copies of :data:`_CHUNK_ROWS` rows.

    ``norms_out``: a list to which each row's L2 norm as given (float64, an ``(n,)`` array) is appended, so a caller
    can tell v from 2v, which have one unit vector."""
    given = vecs = np.asarray(vecs)
    if vecs.ndim != 2:
        raise EmbeddingsError(f"{source}: embeddings must be an (n, d) array, got shape {vecs.shape}")
    if vecs.shape[1] == 0:
        raise EmbeddingsError(f"{source}: the vectors have 0 dimensions (shape {vecs.shape}): expected (n, d), d > 0")
    if not np.issubdtype(vecs.dtype, np.floating):
        raise _not_float(source, vecs.dtype)
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: refused below, by row
        vecs = np.ascontiguousarray(vecs.astype(np.float32, copy=False))
    owned = (owned or vecs is not given) and vecs.flags.writeable
    n = vecs.shape[0]
    every_norm = np.empty(n, np.float64) if norms_out is not None else None
    for s in range(0, n, _CHUNK_ROWS):
        finite = np.isfinite(vecs[s : s + _CHUNK_ROWS]).all(axis=1)
        if not finite.all():
            raise EmbeddingsError(f"{what(s + int(np.argmin(finite)))}: the vector has a NaN or infinite value (or "
                                  "one beyond float32's range, about ±3.4e38)")
    for s in range(0, n, _CHUNK_ROWS):
        chunk = vecs[s : s + _CHUNK_ROWS].astype(np.float64)
        norms = np.linalg.norm(chunk, axis=1)
        if every_norm is not None:
            every_norm[s : s + _CHUNK_ROWS] = norms
        if (norms == 0).any():
            raise EmbeddingsError(f"{what(s + int(np.argmin(norms)))}: the vector is all zeros (no direction to "
                                  "compare)")
        off = np.abs(norms - 1.0) > UNIT_TOLERANCE
        if off.any():
            if not owned:
                vecs, owned = vecs.copy(), True
            vecs[s : s + _CHUNK_ROWS][off] = (chunk[off] / norms[off, None]).astype(np.float32)
    if norms_out is not None:
        norms_out.append(every_norm)
    return vecs


NPZ_MAX_RATIO = 100
"""A compressed ``.npz`` member declaring an array more than this many times its compressed size (and over
:data:`NPZ_RATIO_FLOOR` bytes) is refused before it is decompressed: float embeddings barely compress, so such a
member is a decompression bomb or not embeddings (save with ``np.savez``, uncompressed, if yours really are)."""
NPZ_RATIO_FLOOR = 64 << 20
MAX_ID_CHARS = 1000
"""The longest line an ``--ids`` file may have (a sample_id is 16 hex digits)."""


class IdsFileError(EmbeddingsFileError):
    """An ``--ids`` path that names no file (the CLI's usage error, exit 2)."""


def _npy_header(fp: Any, where: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, bytes of data declared)`` from the ``.npy`` header at ``fp``'s position, without reading
    the data. Raises EmbeddingsError naming ``where``."""
    from numpy.lib import format as npf

    try:
        version = npf.read_magic(fp)
        if version == (1, 0):
            shape, _, dtype = npf.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, _, dtype = npf.read_array_header_2_0(fp)
        else:
            raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    except EmbeddingsError:
        raise
    except Exception as exc:  # an empty, truncated or hand-made header: its parser's error, named
        raise EmbeddingsError(f"{where}: not a readable .npy array ({type(exc).__name__}: {exc})") from None
    if dtype.hasobject:
        raise EmbeddingsError(f"{where}: an array of Python objects (dtype {dtype}) is not read (it would need "
                              "pickle); save numbers and strings")
    return shape, dtype, int(np.prod(shape, dtype=object)) * dtype.itemsize


def _check_npz(path: Path) -> None:
    """The arrays ``sample_id`` and ``embedding`` of an ``.npz`` are there, and each member's declared shape fits
    what the member holds (and :data:`NPZ_MAX_RATIO`), read from the members' headers before anything is
    decompressed in full. Raises EmbeddingsError naming the file and member."""
    import zipfile

    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as zf:
            members = {i.filename: i for i in zf.infolist()}
            names = [m.removesuffix(".npy") for m in members]
            if "sample_id.npy" not in members or "embedding.npy" not in members:
                raise EmbeddingsError(f"{path}: expected arrays sample_id and embedding, found "
                                      f"{', '.join(names) or 'none'}")
            for key in ("sample_id.npy", "embedding.npy"):
                info = members[key]
                where = f"{path} (array {key.removesuffix('.npy')})"
                if info.compress_size > size:
                    raise EmbeddingsError(f"{where}: the member claims {info.compress_size} bytes in a file of "
                                          f"{size}: truncated")
                with zf.open(info) as fp:
                    shape, dtype, nbytes = _npy_header(fp, where)
                    header = fp.tell()
                if nbytes > info.file_size - header:
                    raise EmbeddingsError(f"{where}: the header declares shape {shape} of {dtype} ({nbytes} bytes), "
                                          f"more than the {max(info.file_size - header, 0)} bytes the member holds")
                if (info.compress_type != zipfile.ZIP_STORED and nbytes > NPZ_RATIO_FLOOR
                        and nbytes > NPZ_MAX_RATIO * info.compress_size):
                    raise EmbeddingsError(f"{where}: shape {shape} of {dtype} ({nbytes} bytes) compressed into "
                                          f"{info.compress_size} bytes: more than {NPZ_MAX_RATIO} times, not "
                                          "embeddings (refused before decompressing; np.savez stores them "
                                          "uncompressed)")
    except EmbeddingsError:
        raise
    except Exception as exc:  # not a zip, a damaged directory, an unreadable member
        raise EmbeddingsError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None


def _read_ids(ids_path: Path, n: int, npy: Path) -> list[str]:
    """The sample ids of the ``n`` rows of ``npy``: UTF-8 text (a BOM at the start is dropped; a file that starts
    with a UTF-16 or UTF-32 byte order mark, as Windows PowerShell's ``>`` and Notepad's "Unicode" write, is read in
    that encoding: the mark says which, so nothing is guessed), one id per line,
    spaces and tabs around it dropped (a published ``sample_id`` is 16 hex digits; a spreadsheet or ``paste`` leaves
    trailing ones), inner ones kept (``\\n``, ``\\r\\n`` or ``\\r`` ends a line). Blank lines at
    the end are ignored; a blank line before an id is an error naming it. Read line by line and stopped at the
    first id beyond ``n``, so a wrong file costs no more memory than ``n`` ids. Raises IdsFileError (no such file)
    or EmbeddingsError (naming the file and line)."""
    if not ids_path.is_file():
        raise IdsFileError(f"{ids_path}: no such file" + (" (a folder)" if ids_path.is_dir() else ""))
    ids: list[str] = []
    blank = lineno = 0
    encoding, named = "utf-8-sig", "UTF-8"
    try:
        with open(ids_path, "rb") as fh:
            head = fh.read(4)
        encoding, named = _bom_encoding(head) or (encoding, named)
        with open(ids_path, encoding=encoding, newline=None) as fh:
            while line := fh.readline(MAX_ID_CHARS + 2):
                lineno += 1
                line = line.removesuffix("\n")
                if "\0" in line:
                    raise EmbeddingsError(f"{ids_path}: line {lineno} holds NUL characters: not {named} text (UTF-16 "
                                          "without a byte order mark?): save it as UTF-8, one sample_id per line")
                if len(line) > MAX_ID_CHARS:
                    raise EmbeddingsError(f"{ids_path}: line {lineno} is longer than {MAX_ID_CHARS} characters: "
                                          "not a sample_id (one per line)")
                if not line.strip():
                    blank = blank or lineno
                    continue
                if blank:
                    raise EmbeddingsError(f"{ids_path}: line {blank} is blank: one sample_id per line, in the "
                                          f"order of the rows of {npy} (blank lines only at the end)")
                if len(ids) == n:
                    raise EmbeddingsError(f"{ids_path}: more than {n} ids for the {n} rows of {npy} (line "
                                          f"{lineno} is id {n + 1})")
                ids.append(line.strip(" \t"))
    except UnicodeDecodeError as exc:
        raise EmbeddingsError(f"{ids_path}: not {named} text after line {lineno} ({exc})"
                              + ("" if named == "UTF-8" else " though it starts with a byte order mark saying so")
                              + ": save it as UTF-8, one sample_id per line") from None
    except OSError as exc:
        raise EmbeddingsError(f"{ids_path}: cannot read the ids ({exc})") from None
    if len(ids) != n:
        raise EmbeddingsError(f"{ids_path}: {len(ids)} ids for the {n} rows of {npy} (one sample_id per line)")
    return ids


def _bom_encoding(head: bytes) -> tuple[str, str] | None:
    """``(codec, name)`` of a text file whose first bytes ``head`` are a UTF-16 or UTF-32 byte order mark (the
    codec reads the mark and the byte order from it), else None. UTF-32's marks first: little-endian UTF-32's
    begins with UTF-16's."""
    import codecs

    for bom, codec, name in ((codecs.BOM_UTF32_LE, "utf-32", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
                             (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16", "UTF-16")):
        if head.startswith(bom):
            return codec, name
    return None


def _read_one(path: Path, ids_path: Path | None) -> tuple[list[str], np.ndarray]:
    """``(sample ids, (n, d) vectors)`` of one embeddings file. Raises EmbeddingsFileError (no such file, unknown
    format), IdsFileError, or EmbeddingsError naming the file for anything it cannot read (an empty or truncated
    file, a header declaring more than the file holds, an array too large for memory)."""
    if not path.is_file():
        raise EmbeddingsFileError(f"{path}: no such file" + (" (a folder)" if path.is_dir() else ""))
    try:
        return _read_file(path, ids_path)
    except EmbeddingsError:
        raise
    except MemoryError:
        raise EmbeddingsError(f"{path}: too large for this machine's memory") from None
    except Exception as exc:  # anything a reader raises on a damaged file: the file named, one line (the cause kept
        # for --debug's traceback: a bug in a reader must not pass for a damaged file without a trace)
        raise EmbeddingsError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc


def _read_file(path: Path, ids_path: Path | None) -> tuple[list[str], np.ndarray]:
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            t = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            raise EmbeddingsError(f"{path}: not a readable Parquet file ({exc})") from None
        missing = [c for c in ("sample_id", "embedding") if c not in t.column_names]
        if missing:
            raise EmbeddingsError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(t.column_names)}); "
                                  "expected sample_id (string) and embedding (fixed_size_list<float32>[d])")
        col = t.column("embedding").combine_chunks()
        if col.null_count:
            row = int(np.argmax(np.asarray(col.is_null())))
            raise EmbeddingsError(f"{path}: row {row} (sample_id {t.column('sample_id')[row].as_py()!r}) has no vector "
                                  f"(a null embedding; {col.null_count} such rows)")
        if pa.types.is_fixed_size_list(col.type):
            d = col.type.list_size
        elif pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            lengths = np.asarray(pc.list_value_length(col).fill_null(-1))
            if len(lengths) and (lengths.min() != lengths.max() or lengths.min() <= 0):
                raise EmbeddingsError(f"{path}: the embedding lists do not all have one positive length "
                                      f"(lengths {int(lengths.min())} .. {int(lengths.max())})")
            d = int(lengths[0]) if len(lengths) else 0
        else:
            raise EmbeddingsError(f"{path}: column embedding is {col.type}, expected fixed_size_list<float32>[d]")
        values = col.flatten()
        if not pa.types.is_floating(values.type):  # before converting: an integer list with a null is no float
            raise _not_float(str(path), values.type)
        vecs = np.asarray(values.to_numpy(zero_copy_only=False)).reshape(len(col), d)
        ids_col = t.column("sample_id")
        if not pa.types.is_string(ids_col.type) and not pa.types.is_large_string(ids_col.type):
            raise EmbeddingsError(f"{path}: column sample_id is {ids_col.type}, expected string")
        if ids_col.null_count:
            raise EmbeddingsError(f"{path}: {ids_col.null_count} rows have a null sample_id")
        return ids_col.to_pylist(), vecs
    if name.endswith(".npz"):
        _check_npz(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                sid, vecs = z["sample_id"], z["embedding"]
        except (OSError, ValueError, EOFError) as exc:
            raise EmbeddingsError(f"{path}: not a readable .npz file ({exc})") from None
        if sid.dtype.kind != "U" or sid.ndim != 1:  # as Parquet's string column: bytes or numbers are no sample_id
            kind = {"S": "bytes", "i": "integers", "u": "integers", "f": "floats", "b": "bool"}.get(sid.dtype.kind,
                                                                                                   str(sid.dtype))
            hint = "; decode them first, e.g. ids.astype(str)" if sid.dtype.kind == "S" else ""
            raise EmbeddingsError(f"{path}: array sample_id is {kind} ({sid.dtype}) of shape {sid.shape}, expected "
                                  f"strings (numpy str) of shape (n,){hint}")
        return sid.tolist(), vecs
    if name.endswith(".npy"):
        if ids_path is None:
            raise EmbeddingsError(f"{path}: a .npy file needs its ids (--ids FILE: one sample_id per line)")
        with open(path, "rb") as fp:
            shape, dtype, nbytes = _npy_header(fp, str(path))
            held = path.stat().st_size - fp.tell()
        if nbytes > held:
            raise EmbeddingsError(f"{path}: the header declares shape {shape} of {dtype} ({nbytes} bytes), more than "
                                  f"the {held} bytes the file holds after it: truncated or not this array")
        if len(shape) != 2:
            raise EmbeddingsError(f"{path}: an array of shape {shape}, expected (n, d)")
        ids = _read_ids(Path(ids_path), shape[0], path)  # before the vectors: a wrong ids file costs no more
        try:
            vecs = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise EmbeddingsError(f"{path}: not a readable .npy file ({exc})") from None
        return ids, vecs
    raise EmbeddingsFileError(f"{path}: unknown format (expected .parquet, .npz, or .npy with --ids)")


def embeddings_name(files: Sequence[str | Path], name: str | None = None) -> str | None:
    """The model name of precomputed embeddings: ``name`` when given, else the first file's name without its
    suffix (``mine.parquet``: ``mine``); None with no file. The one rule for the library and the CLI."""
    return name or (Path(files[0]).stem if files else None)


class PrecomputedEmbeddings:
    """Vectors by ``sample_id`` (see the module docstring), scored as a model named ``name``.

    ``info()["revision"]`` is ``sha256:<16 hex>`` of the ids and vectors, so a score row says exactly which
    embeddings it came from.
    """

    def __init__(self, ids: Sequence[str], vectors: np.ndarray, name: str, source: str = "",
                 training_cutoff: date | None = None):
        """``ids``: n sample ids; ``vectors``: a real ``(n, d)`` array (not modified; float32 unit vectors are
        kept). Raises EmbeddingsError (a count mismatch, a vector not finite or all zeros, an id given twice with
        two different vectors: v and 2v are two, though one cosine)."""
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or len(ids) != vectors.shape[0]:
            raise EmbeddingsError(f"{source or name}: {len(ids)} ids for an array of shape {vectors.shape} "
                                  "(expected (n, d) with n ids)")
        norms: list[np.ndarray] = []
        unit = _unit(vectors, lambda i: f"{source or name}: sample_id {ids[i]!r}", source=source or name,
                     norms_out=norms)
        if np.shares_memory(unit, vectors):  # the caller's array: not kept, so that changing it changes no score
            unit = unit.copy()
        self._index_unit(ids, unit, norms[0], name, source, training_cutoff)

    def _index_unit(self, ids: Sequence[str], vectors: np.ndarray, norms: np.ndarray, name: str, source: str,
                    training_cutoff: date | None) -> None:
        """Index float32 unit ``vectors`` (checked by :func:`_unit`) by id, once each. An id given twice is an
        EmbeddingsError naming it unless both rows were the same vector as given: the same unit vector and the same
        norm (``norms``, each row's as given; equal up to float64 rounding), so v and 2v, one cosine, are two."""
        self.index: dict[str, int] = {}
        keep = []
        for i, sid in enumerate(ids):
            j = self.index.get(sid)
            if j is None:
                self.index[sid] = len(keep)
                keep.append(i)
            elif not (np.array_equal(vectors[keep[j]], vectors[i])
                      and abs(norms[keep[j]] - norms[i]) <= 1e-12 * norms[i]):
                raise EmbeddingsError(f"{source or name}: sample_id {sid!r} is given twice with different vectors "
                                      "(compared as given: v and 2v are two, though one cosine): give it once")
        self.vectors = vectors if len(keep) == len(ids) else vectors[keep]  # a copy only to drop repeats
        self.used = np.zeros(len(keep), dtype=bool)  # which vectors a scored file's rows asked for
        self.name, self.source, self.training_cutoff = name, source, training_cutoff
        h = hashlib.sha256()
        for sid in self.index:
            h.update(sid.encode() + b"\0")
        h.update(np.ascontiguousarray(self.vectors).data)  # the bytes of tobytes(), without a copy
        self.digest = h.hexdigest()

    @classmethod
    def load(cls, paths: Sequence[str | Path], ids: str | Path | None = None, name: str | None = None,
             training_cutoff: date | None = None) -> "PrecomputedEmbeddings":
        """Read one or more embeddings files (Parquet, ``.npz``, or one ``.npy`` with ``ids``). Each file's
        vectors are checked and normalised on their own, so an error names the one file that holds the vector.
        Raises EmbeddingsFileError (no such file, unknown format), IdsFileError (no such ids file), or
        EmbeddingsError naming the file (unreadable, empty, truncated, too large, bad vectors)."""
        paths = [Path(p) for p in paths]
        if not paths:
            raise EmbeddingsError("no embeddings file given")
        if ids is not None and not (len(paths) == 1 and paths[0].suffix.lower() == ".npy"):
            raise EmbeddingsError("--ids goes with exactly one .npy embeddings file")
        all_ids: list[str] = []
        parts: list[np.ndarray] = []
        norms: list[np.ndarray] = []  # each row's norm as given: v and 2v are two vectors
        for p in paths:
            i, v = _read_one(p, Path(ids) if ids is not None else None)
            v = np.asarray(v)
            if v.ndim != 2 or v.shape[0] != len(i):
                raise EmbeddingsError(f"{p}: {len(i)} ids for vectors of shape {v.shape} (expected (n, d))")
            if parts and v.shape[1] != parts[0].shape[1]:
                raise EmbeddingsError(f"{p}: vectors of {v.shape[1]} dimensions, but {paths[0]} has "
                                      f"{parts[0].shape[1]}")
            all_ids += i
            parts.append(_unit(v, lambda r, p=p, i=i: f"{p}: sample_id {i[r]!r}", owned=True, source=str(p),
                               norms_out=norms))
            del v
        vecs = np.concatenate(parts) if len(parts) > 1 else parts[0]
        del parts
        obj = cls.__new__(cls)
        obj._index_unit(all_ids, vecs, np.concatenate(norms), embeddings_name(paths, name),
                        ", ".join(str(p) for p in paths), training_cutoff)
        return obj

    def vectors_for(self, f: Any, progress: Any = None) -> np.ndarray:
        """The vectors of a release file's rows (``f.column("sample_id")``), in row order. Raises
        EmbeddingsError when rows have no vector."""
        ids = f.column("sample_id")
        rows = [self.index.get(s) for s in ids]
        missing = [s for s, r in zip(ids, rows) if r is None]
        if missing:
            from .releases.reader import NOISE

            noise = f.key.split("/")[0] == NOISE
            none = len(missing) == len(ids) and not self.used.any()  # no id given has matched a row yet
            raise EmbeddingsError(
                f"{self.source or self.name}: {len(missing)} of the {len(ids)} rows of {f.key} have no embedding "
                f"(sample_id {', '.join(map(repr, missing[:3]))}{'…' if len(missing) > 3 else ''})"
                + (f"; none of the {len(self.index)} sample_ids given matched a row so far: embeddings of another "
                   "release?" if none else "")
                + ("; give a vector for every sample_id of the query, gallery and noise gallery files scored"
                   + ("; the noise gallery is in every subset's gallery, so it is always scored" if noise
                      else ", or score fewer subsets (--subset)")))
        if progress is not None:
            progress.update(len(ids))
        if not rows:
            return np.zeros((0, self.dim), np.float32)
        rows_arr = np.asarray(rows, dtype=np.int64)
        self.used[rows_arr] = True
        return self.vectors[rows_arr]

    def unused_ids(self) -> list[str]:
        """The sample_ids whose vectors no file scored so far asked for (ids of another release, or of subsets
        not scored), in the order given."""
        return [sid for sid, j in self.index.items() if not self.used[j]]

    def unused_note(self, ev: Any, store: Any) -> str | None:
        """What to tell the researcher about :meth:`unused_ids` after the evaluation ``ev`` of a release in
        ``store`` (an ObjectStore or a pulled ReleaseFolder); None when every vector was used. When fewer subsets
        were scored than the manifest lists (``--subset``, subsets not pulled, an empty gallery), the note names
        those scored rather than suspect another release's embeddings."""
        from .releases.reader import manifest_subsets, read_manifest

        unused = self.unused_ids()
        if not unused:
            return None
        listed = manifest_subsets(read_manifest(store, ev.release))
        scored = sorted(set(ev.scores.column("subset").to_pylist()) & set(listed))
        subsets = scored if scored != listed else None
        scope = f"the subsets scored ({', '.join(subsets)})" if subsets else ev.release
        return (f"{len(unused)} of the {len(self.index)} sample_ids in {self.source or self.name} are not in "
                f"{scope} and were not used (e.g. {', '.join(map(repr, unused[:3]))})"
                + ("" if subsets else ": embeddings of another release?"))

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def info(self) -> dict[str, Any]:
        return {"model_id": self.name, "backend": "embeddings", "source": self.source,
                "revision": f"sha256:{self.digest[:16]}", "input_size": None, "dim": self.dim, "dtype": "float32",
                "device": None, "weights_sha256": None,
                "training_cutoff": self.training_cutoff.isoformat() if self.training_cutoff else None}


class FunctionEmbedder:
    """A function from a batch of ``PIL.Image`` objects to an ``(n, d)`` array, scored as a model named ``name``.

    Each distinct row (``sample_id`` and image sha256) is embedded once per run, even when it appears in several
    subsets' galleries. Its output goes through the same checks and normalisation as precomputed embeddings, and
    the vectors kept are copies: ``embed_fn`` may return the same buffer every call.
    """

    def __init__(self, embed_fn: Callable[[list[Any]], Any], name: str = "my-model", batch_size: int = 64,
                 training_cutoff: date | None = None):
        if not callable(embed_fn):
            raise TypeError(f"embed_fn must be callable, got {type(embed_fn).__name__}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.fn, self.name, self.batch_size, self.training_cutoff = embed_fn, name, batch_size, training_cutoff
        self.memo: dict[tuple[str, str], np.ndarray] = {}
        self._dim: int | None = None

    def vectors_for(self, f: Any, progress: Any = None) -> np.ndarray:
        """The vectors of a release file's rows (``f``, an ``evaluate.ReleaseFile``), in row order: ``(n, d)``
        float32 unit vectors. Raises ReleaseIntegrityError naming the file, column, row and sample_id of an image
        that cannot be decoded (as ``lookbench evaluate`` does), EmbeddingsError for an output that cannot be
        scored, and whatever ``embed_fn`` raises."""
        ids, shas = f.column("sample_id"), f.column("image_sha256")
        todo = [i for i in range(f.num_rows) if (ids[i], shas[i]) not in self.memo]
        if progress is not None:
            progress.update(f.num_rows - len(todo))
        for s in range(0, len(todo), self.batch_size):
            batch = todo[s : s + self.batch_size]
            images = [f.decoded_image(f.image_bytes(i), i) for i in batch]  # a bad row named, as the CLI
            given = out = np.asarray(self.fn(images))
            if out.ndim != 2 or out.shape[0] != len(batch):
                raise EmbeddingsError(f"{self.name}: embed_fn returned shape {out.shape} for {len(batch)} images "
                                      "(expected (n, d))")
            if self._dim is not None and out.shape[1] != self._dim:
                raise EmbeddingsError(f"{self.name}: embed_fn returned {out.shape[1]} dimensions, earlier "
                                      f"{self._dim}")
            self._dim = int(out.shape[1])
            out = _unit(out, lambda j: f"{self.name}: {f.key} row {batch[j]} (sample_id {ids[batch[j]]!r})",
                        source=f"{self.name}: embed_fn output")
            if np.may_share_memory(out, given):  # float32 unit vectors, kept as given: embed_fn's own memory,
                out = out.copy()  # which it may reuse for the next batch (a preallocated buffer, a tensor's storage)
            for j, i in enumerate(batch):
                self.memo[(ids[i], shas[i])] = out[j]
            if progress is not None:
                progress.update(len(batch))
        if f.num_rows == 0:
            return np.zeros((0, self._dim or 0), np.float32)
        return np.stack([self.memo[(ids[i], shas[i])] for i in range(f.num_rows)])

    def info(self) -> dict[str, Any]:
        return {"model_id": self.name, "backend": "function", "source": getattr(self.fn, "__qualname__", None),
                "revision": None, "input_size": None, "dim": self._dim, "dtype": "float32", "device": None,
                "weights_sha256": None,
                "training_cutoff": self.training_cutoff.isoformat() if self.training_cutoff else None}


API_WORDS = {"set": "cutoff={cutoff!r}", "none": "no cutoff", "model": "cutoff='model'", "tc": "training_cutoff",
             "add_tc": "training_cutoff='YYYY-MM-DD' (your model's)", "date": "cutoff='YYYY-MM-DD'"}
"""How :func:`check_training_cutoffs` names the settings to a caller of :func:`score` (``lookbench evaluate``
passes its flags' names)."""


def check_training_cutoffs(cutoff: str | None, training_cutoffs: Mapping[str, date | None],
                           model_cutoffs: Mapping[str, Any] | None = None,
                           words: Mapping[str, str] = API_WORDS) -> None:
    """The rule pairing a cutoff with your own models' training cutoffs, one rule for ``lookbench evaluate
    --embeddings`` and :func:`score`: a training cutoff is used by cutoff ``"model"`` (each model scored from its
    own), so one given with another cutoff, or none, would be silently unused; and with ``"model"`` every model of
    ``training_cutoffs`` (name -> its own cutoff or None) needs one, given or in ``model_cutoffs`` (the
    configuration's ``evaluate.model_cutoffs``), or every query would be scored, silently. ``words`` names the
    settings (:data:`API_WORDS`). Raises ValueError naming the setting to add or leave out."""
    w = dict(words)
    if any(tc is not None for tc in training_cutoffs.values()) and cutoff != "model":
        raise ValueError(f"{w['tc']} is used by {w['model']} (each model from its own cutoff); with "
                         + (w["set"].format(cutoff=cutoff) + " every model is scored from that date" if cutoff else
                            f"{w['none']} every query is scored")
                         + f": add {w['model']}, or leave {w['tc']} out")
    if cutoff == "model":
        for name, tc in training_cutoffs.items():
            if tc is None and name not in (model_cutoffs or {}):
                raise ValueError(f"{w['set'].format(cutoff='model')} scores each model from its training cutoff, "
                                 f"and {name!r} has none: add {w['add_tc'].format(name=name)}, or give a date: "
                                 f"{w['date']}")


def nothing_scored_reasons(ev: Any) -> list[str]:
    """Why an evaluation has no score: one line per skipped model and per model and subset left unscored, then
    its warnings (what was left out: a release with no subset to score, subsets not pulled)."""
    return ([f"skipped {s['model']}: {s['reason']}" for s in ev.skipped]
            + [f"not scored: {u['model']} on {u['subset']}: {u['reason']}" for u in ev.unscored]
            + list(getattr(ev, "warnings", [])))


def score(release: str | Path, embed_fn: Callable[[list[Any]], Any] | None = None, *,
          embeddings: str | Path | Sequence[str | Path] | None = None, ids: str | Path | None = None,
          name: str | None = None, subsets: Sequence[str] | None = None, cutoff: date | str | None = None,
          training_cutoff: date | str | None = None, ks: Sequence[int] = (1, 5, 10, 20), batch_size: int = 64,
          progress: bool = False, seed: int = 0) -> Any:
    """Score a model on a pulled release folder (``lookbench pull``'s ``DEST/<version>``), from a notebook.

    Args:
        release: the folder (it holds ``manifest.json``; every file is checked against its sha256).
        embed_fn: a function from a list of ``PIL.Image`` (the published images, decoded as loaders do) to an
            ``(n, d)`` float array, one row per image, called in batches of ``batch_size``.
        embeddings: instead of ``embed_fn``: precomputed embedding file(s), see the module docstring (``ids``:
            the ids file of a ``.npy``).
        name: the model's name in the scores (default ``embed_fn``'s name, or the first file's stem).
        subsets: only these subsets (default: all).
        cutoff: a date (``YYYY-MM-DD`` or ``datetime.date``): only queries first seen on or after it are scored;
            ``"model"``: from ``training_cutoff``.
        training_cutoff: your model's training cutoff (``YYYY-MM-DD`` or ``datetime.date``), used by
            ``cutoff="model"`` and needed by it; with another cutoff it is refused (ValueError) rather than unused
            (the rule of ``lookbench evaluate``: :func:`check_training_cutoffs`).
        ks: the K of Recall@K and nDCG@K (integers >= 1, each once, as ``evaluate.ks``; values are fractions in
            ``[0, 1]`` in the scores).
    Returns:
        The :class:`lookbench_pipeline.evaluate.Evaluation`: ``.scores`` is the SCORES table (one row per model,
        subset incl. ``overall``, metric; ``value`` with its bootstrap interval ``ci_low`` / ``ci_high``;
        ``.scores.to_pandas()`` for a DataFrame where pandas is installed); :func:`site_benchmark` turns it into
        ``benchmark.json``.
    Warns:
        UserWarning: each of ``ev.warnings`` (what ``lookbench evaluate`` prints as ``warning:``: subsets of the
        folder that were not pulled, subsets this version does not know, an empty noise gallery) and of
        ``ev.notes`` (``note:``, e.g. a K larger than a subset's gallery), and ``embeddings`` that hold sample_ids no
        file scored has (they are not used). They stay on the returned ``ev.warnings`` / ``ev.notes``;
        ``warnings.simplefilter("ignore", UserWarning)`` silences them.
    Raises:
        ValueError: neither or both of ``embed_fn`` and ``embeddings``; an unknown subset; a bad cutoff; a
        ``training_cutoff`` without ``cutoff="model"``, or ``cutoff="model"`` without a ``training_cutoff``; K that
        are not integers >= 1 each once.
        EmbeddingsError: embeddings that cannot be scored.
        NothingScoredError: no score came out (every query before the cutoff, for instance): the reasons.
        FileNotFoundError: an asked-for subset that was not pulled, or a file the pull brought that is gone (the
            noise gallery, one of a pulled subset's files): the folder is damaged (both name the files).
        StoreError, ReleaseIntegrityError: not a release folder, or a file that does not match the manifest;
            with ``embed_fn``, a row whose image cannot be decoded (the file, column ``image``, row and
            ``sample_id`` named, as ``lookbench evaluate`` names them).
    """
    from .evaluate import run_evaluation
    from .store import ReleaseFolder

    if (embed_fn is None) == (embeddings is None):
        raise ValueError("give exactly one of embed_fn (a function of PIL images) and embeddings (files)")
    import warnings

    from .config.sections import parse_day

    tc = parse_day(training_cutoff) if training_cutoff is not None else None
    if isinstance(cutoff, date):
        cutoff = cutoff.isoformat()
    files = [embeddings] if isinstance(embeddings, (str, Path)) else list(embeddings or [])
    name = name or (getattr(embed_fn, "__name__", "my-model") if embed_fn is not None else embeddings_name(files))
    check_training_cutoffs(cutoff, {name: tc})  # before a file is read
    if embed_fn is not None:
        model: Any = FunctionEmbedder(embed_fn, name, batch_size, tc)
    else:
        model = PrecomputedEmbeddings.load(files, ids, name, tc)
    folder = ReleaseFolder(release)
    ev = run_evaluation(folder, folder.version, (), None, ks, cutoff, n_examples=0, progress=progress, seed=seed,
                        embedders_given={model.info()["model_id"]: model}, subsets=subsets)
    if ev.scores.num_rows == 0:
        raise NothingScoredError("nothing was scored: " + "; ".join(nothing_scored_reasons(ev)))
    for note in [*ev.warnings, *ev.notes]:
        warnings.warn(note, UserWarning, stacklevel=2)
    note = model.unused_note(ev, folder) if isinstance(model, PrecomputedEmbeddings) else None
    if note:
        warnings.warn(note, UserWarning, stacklevel=2)
    return ev


SITE_SUBSETS = {"real_studio_flat": "Real Studio", "real_streetlook": "Real StreetLook",
                "aigen_studio": "AI-Gen Studio", "aigen_streetlook": "AI-Gen StreetLook", "overall": "Overall"}
"""Our subset names -> the LookBench site's tab names (``benchmark.json`` keys)."""
SITE_FAMILIES = {"coarse_recall": "Coarse Recall", "fine_recall": "Fine Recall", "ndcg": "nDCG",
                 "item_recall": "Item Recall"}
"""Our metric families -> the site's metric names; a legacy benchmark's exact-item Recall is the site's
``Recall``."""


def site_benchmark(scores: pa.Table | Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Scores in the shape of the LookBench site's ``benchmark.json`` (the file its leaderboard page loads,
    ``configs/release_vYYMM/benchmark.json`` in github.com/SerendipityOneInc/look-bench-page, read by its
    ``style/js/lookbench-leaderboard.js``): ``{subset tab: {model: {metric: {"@K": percent}}}}``, e.g.
    ``{"Real Studio": {"CLIP-B/32": {"Coarse Recall": {"@1": 67.26, …}, "Fine Recall": {…}, "nDCG": {…}}}}``.

    Tabs: ``Real Studio``, ``Real StreetLook``, ``AI-Gen Studio``, ``AI-Gen StreetLook`` (the site's four), plus
    ``Overall`` and each legacy benchmark by its name (``Recall`` only, the exact-item Recall@K). Metrics: the
    site's ``Coarse Recall``, ``Fine Recall``, ``nDCG`` and our exact-item ``Item Recall``; values in percent,
    rounded to 2 decimals as the site's are. The noise-gallery rates are not part of the shape and are left out.
    """
    rows = scores.to_pylist() if isinstance(scores, pa.Table) else list(scores)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for r in rows:
        fam, _, k = str(r["metric"]).partition("@")
        subset = str(r["subset"])
        if subset.startswith("legacy:"):
            tab, name = subset.removeprefix("legacy:"), ("Recall" if fam == "item_recall" else None)
        else:
            tab, name = SITE_SUBSETS.get(subset, subset), SITE_FAMILIES.get(fam)
        if name is None or not k:
            continue
        out.setdefault(tab, {}).setdefault(str(r["model"]), {}).setdefault(name, {})[f"@{k}"] = \
            round(100 * float(r["value"]), 2)
    order = {t: i for i, t in enumerate(SITE_SUBSETS.values())}
    return {t: {m: {f: dict(sorted(v.items(), key=lambda kv: int(kv[0][1:]))) for f, v in fams.items()}
                for m, fams in sorted(models.items())}
            for t, models in sorted(out.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))}
