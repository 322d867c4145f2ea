"""A published release's files as the evaluation reads them: :class:`ReleaseFile` (label columns at once, image
bytes only when needed, integrity checked against the manifest), their embeddings (:func:`embed_file`, through the
embedding cache and per-file packs), and their labels encoded for the metrics (:func:`label_codes`). Imports no
sibling.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..embed import EmbeddingCache
from ..embed.packs import file_pack_load, file_pack_save, published_image
from ..memo import file_stamp
from ..metrics import LabelCodes
from ..releases.reader import (SCORED_COLUMNS, ReleaseIntegrityError, check_scored_schema, check_scored_table,
                               read_file, release_prefix)
from ..store import LocalStore, ObjectStore


META_COLUMNS = [c for c in SCORED_COLUMNS if c != "image"]


class ReleaseFile:
    """One file of a published release, read so that re-scoring from cached embeddings never touches image bytes:
    the label columns (:data:`META_COLUMNS`) at once, the ``image`` column only when an image is needed (an
    embedding not in the cache, a thumbnail for the report, the contamination re-check of queries).

    Integrity: the file is checked against the manifest's sha256 (``self.sha256``) before use. On a local store it
    is read in place and a verified ``(path, memo.file_stamp)`` is remembered in ``verified`` (a dict the caller
    persists), so a re-evaluation does not hash gigabytes of gallery again; other stores are fetched whole and
    verified by ``release.read_file``. Then its table is checked against the published schema
    (``releases.reader.check_scored_table``: the scored columns and their types, no null ``sample_id`` or
    ``item_ID``, each ``sample_id`` once); an image that is missing or cannot be decoded is an error naming the file
    and the row's ``sample_id`` when it is read (:meth:`image_bytes`, :func:`embed_file`).
    """

    def __init__(self, store: ObjectStore, version: str, manifest: dict, subset: str, role: str,
                 verified: dict[str, str]):
        self.key = f"{subset}/{role}.parquet"
        self.name = f"{version}/{self.key}"
        self.sha256 = manifest["files"][self.key]["sha256"]
        local = store.path(f"{release_prefix(version)}/{self.key}") if isinstance(store, LocalStore) else None
        self._local: Path | None = None
        self._table: pa.Table | None = None
        if local is not None and local.is_file():
            _verify_local(local, self.sha256, self.name, verified)
            try:
                check_scored_schema(pq.read_schema(local), self.name)
                self.meta = pq.read_table(local, columns=META_COLUMNS)
            except pa.ArrowException as exc:
                raise ReleaseIntegrityError(f"{self.name}: not a readable Parquet file ({exc})") from None
            self._local = local
        else:
            try:
                self._table = read_file(store, version, subset, role, manifest=manifest)
            except pa.ArrowException as exc:
                raise ReleaseIntegrityError(f"{self.name}: not a readable Parquet file ({exc})") from None
            check_scored_schema(self._table.schema, self.name)
            self.meta = self._table.select(META_COLUMNS)
        check_scored_table(self.meta, self.name)
        self.num_rows = self.meta.num_rows
        self._images: pa.ChunkedArray | None = None

    def column(self, name: str) -> list:
        return self.meta.column(name).to_pylist()

    def images(self) -> pa.ChunkedArray:
        """The ``image`` column (Hugging Face Image structs), read on first use."""
        if self._images is None:
            t = pq.read_table(self._local, columns=["image"]) if self._local is not None else self._table
            self._images = t.column("image")
        return self._images

    def image_bytes(self, i: int) -> bytes:
        """The published image bytes of row ``i``. Raises ReleaseIntegrityError (the file, the row and its
        ``sample_id``) for a row without image bytes."""
        v = self.images()[i]
        data = v["bytes"].as_py() if v.is_valid else None
        if not data:
            raise ReleaseIntegrityError(f"{self.name}: column image: row {i} (sample_id {self.sample_id(i)!r}) has no "
                                        "image bytes")
        return data

    def sample_id(self, i: int) -> str:
        return self.meta["sample_id"][i].as_py()

    def decoded_image(self, data: bytes, i: int) -> Any:
        """Row ``i``'s image bytes ``data`` decoded (PIL, as a consumer's loader opens them). Raises
        ReleaseIntegrityError naming the file, the row and its ``sample_id`` for bytes that are not an image."""
        from PIL import Image

        try:
            img = published_image(data)
            img.load()
        except (OSError, ValueError, SyntaxError, TypeError, Image.DecompressionBombError) as exc:
            raise ReleaseIntegrityError(f"{self.name}: column image: row {i} (sample_id {self.sample_id(i)!r}) "
                                        f"cannot be decoded as an image ({type(exc).__name__}: "
                                        f"{str(exc).split(' <_io.')[0]})") from None
        return img

    def table_for_contamination(self) -> pa.Table:
        """``image``, ``image_sha256``, ``sample_id`` (for :func:`contamination_flags`)."""
        return pa.table({"image": self.images(), "image_sha256": self.meta["image_sha256"],
                         "sample_id": self.meta["sample_id"]})


def embed_file(cache: EmbeddingCache, emb: Any, f: ReleaseFile, progress: Any = None,
               chunk: int = 2048) -> np.ndarray:
    """``(f.num_rows, dim)`` float32 embeddings of a release file's images, in row order.

    Each image is embedded from its published bytes as a consumer's loader decodes them (PIL, full size), and
    cached in ``cache`` under the sha256 of those bytes (so a vector is always that of exactly those bytes). The
    whole file's matrix is also kept as a pack keyed by the file's sha256 (which fixes every row's bytes):
    re-scoring loads it without reading one image.
    """
    vecs = file_pack_load(cache, f.sha256, f.num_rows)
    if vecs is not None:
        if progress is not None:
            progress.update(f.num_rows)
        return vecs
    out = np.zeros((f.num_rows, cache.dim), dtype=np.float32)
    for s in range(0, f.num_rows, chunk):
        idx = range(s, min(s + chunk, f.num_rows))
        data = [f.image_bytes(i) for i in idx]
        shas = [hashlib.sha256(d).hexdigest() for d in data]
        out[s : s + len(data)] = cache.embed(emb, shas, lambda i, s=s: f.decoded_image(data[i], s + i))
        if progress is not None:
            progress.update(len(data))
    file_pack_save(cache, f.sha256, out)
    return out


def _vectors(emb: Any, cache: EmbeddingCache | None, f: ReleaseFile, progress: Any = None) -> np.ndarray:
    """``(f.num_rows, dim)`` vectors of a release file's rows from a model: ``emb.vectors_for`` (precomputed
    embeddings, a function) or :func:`embed_file` through the embedding cache."""
    if hasattr(emb, "vectors_for"):
        return emb.vectors_for(f, progress)
    return embed_file(cache, emb, f, progress)


def _verify_local(path: Path, expected: str, name: str, verified: dict[str, str]) -> None:
    import hashlib

    from ..releases.reader import ReleaseIntegrityError

    st = path.stat()
    key = f"{path.resolve()}:{file_stamp(st)}"
    if verified.get(key) == expected:
        return
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    if h.hexdigest() != expected:
        raise ReleaseIntegrityError(f"{name}: sha256 does not match the manifest")
    verified[key] = expected


def _load_verified(cache_dir: Path | None, warn: list[str] | None = None) -> dict[str, str]:
    """The files verified earlier (``verified_release_files.json`` in ``cache_dir``: ``{path and stamp: sha256}``).
    A file that is not such a JSON object of strings (damaged, or written by something else) is ignored: every
    file is hashed again and the cache is rewritten; the message naming it is appended to ``warn``."""
    import json

    f = Path(cache_dir) / "verified_release_files.json" if cache_dir is not None else None
    if f is None or not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
        why = None if isinstance(data, dict) else f"a JSON {type(data).__name__}, not an object"
        if why is None and not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            why = "values that are not sha256 strings"
    except (ValueError, OSError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        why = str(exc)
    if why is None:
        return data
    if warn is not None:
        warn.append(f"{f}: not a cache of verified release files ({why}): ignored; every release file is hashed "
                    "again and the cache rewritten")
    return {}


def _save_verified(cache_dir: Path | None, verified: dict[str, str]) -> None:
    import json

    if cache_dir is None:
        return
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(cache_dir) / "verified_release_files.json.tmp"
    tmp.write_text(json.dumps(verified, sort_keys=True))
    tmp.replace(Path(cache_dir) / "verified_release_files.json")


def _row_labels(t: pa.Table, i: int) -> tuple[str, dict[str, str]]:
    """Category and attributes ``{name: value}`` of row ``i``."""
    return t["category"][i].as_py(), {a["name"]: a["value"] for a in t["attributes"][i].as_py() or []}


def label_codes(q: pa.Table, g: pa.Table) -> LabelCodes:
    """:class:`metrics.LabelCodes` of query and gallery tables (columns ``category``, ``attributes``), encoded with
    Arrow compute and NumPy instead of a Python loop over rows (the same codes' comparisons as
    ``LabelCodes(categories, attribute dicts, ...)``: "not visible" and null values are not carried; a name given
    twice in a row keeps its last value)."""
    from ..metrics import NOT_VISIBLE

    def codes_of(arr: pa.Array) -> tuple[np.ndarray, int]:  # hash-based dictionary codes (no string sorting)
        enc = pc.dictionary_encode(arr)
        return np.asarray(enc.indices.fill_null(-1), dtype=np.int64), len(enc.dictionary)

    cats = pa.chunked_array(q["category"].chunks + g["category"].chunks, pa.string()).combine_chunks()
    cat_codes, _ = codes_of(cats)
    attrs = pa.chunked_array(q["attributes"].chunks + g["attributes"].chunks).combine_chunks()
    parent = np.asarray(pc.list_parent_indices(attrs), dtype=np.int64)
    flat = pc.list_flatten(attrs)
    names, values = flat.field("name"), flat.field("value")
    carried = np.asarray(pc.and_(pc.is_valid(values), pc.not_equal(values, NOT_VISIBLE)).fill_null(False))
    name_codes, n_names = codes_of(names)
    codes = np.full((q.num_rows + g.num_rows, n_names), -1, dtype=np.int32)
    n_values = 0
    if len(flat):
        key = parent * n_names + name_codes
        _, first_in_reversed = np.unique(key[::-1], return_index=True)
        last = len(key) - 1 - first_in_reversed  # the last entry of each (row, name): it wins, as in a dict
        sel = last[carried[last]]
        if len(sel):
            idx = pa.array(sel)
            pairs = pc.binary_join_element_wise(names.take(idx), values.take(idx), "\x1f")
            pair_codes, n_values = codes_of(pairs)
            codes[parent[sel], name_codes[sel]] = pair_codes
    nq = q.num_rows
    return LabelCodes.from_codes(cat_codes[:nq], codes[:nq], cat_codes[nq:], codes[nq:], n_values)
