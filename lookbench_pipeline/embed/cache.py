"""The embedding cache on disk (:class:`EmbeddingCache`): vectors per (image sha256, model id, revision, weights
checksum), so a re-run embeds nothing twice. The per-file packs the evaluation keeps in the same folders are
:mod:`lookbench_pipeline.embed.packs`."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from .registry import Embedder


class EmbeddingCache:
    """Embeddings on disk per (image sha256, model id, revision, weights checksum): a re-run embeds nothing twice.

    The sha256 is that of the bytes the vector was computed from (callers key by what they decode: the mining
    stage by the original files, the evaluation by the published JPEG bytes), so a cached vector is always the
    vector of exactly those bytes.

    Layout: ``<root>/<model id>@<revision>[-w<first 12 hex of the weights sha256>]/`` holds segments, each a pair
    ``seg-<uuid>.npy`` (float32 ``(n, dim)``) and ``seg-<uuid>.sha256`` (the n image sha256s, one per line; written
    last, so a segment without it is an interrupted write and is ignored), and ``model.json`` (the embedder's
    info). Segments are memory-mapped; many small ones are merged into one (:meth:`compact`) when opened.
    Concurrent writers are safe (every writer creates its own segment files).

    ``hits`` and ``misses`` count lookups since the cache was opened.
    """

    def __init__(self, root: Path, info: dict, flush_every: int = 4096, compact_above: int = 64):
        rev = info.get("revision") or "main"
        slug = f"{info['model_id']}@{rev}".replace("/", "__").replace(":", "_")
        if info.get("weights_sha256"):
            slug += f"-w{info['weights_sha256'][:12]}"
        if info.get("dtype") not in (None, "float32"):  # bfloat16 vectors differ from float32 ones: kept apart
            slug += f"-{info['dtype']}"
        self.dir = Path(root) / slug
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dim = int(info["dim"])
        self.flush_every = flush_every
        self.hits = self.misses = 0
        meta = self.dir / "model.json"
        if not meta.is_file():
            _atomic_write(meta, json.dumps(info, indent=1, sort_keys=True, default=str).encode())
        self._segments: list[np.ndarray] = []
        self._where: dict[str, tuple[int, int]] = {}
        self._load()
        if len(self._segments) > compact_above:
            self.compact()

    def _load(self) -> None:
        self._segments, self._where = [], {}
        for shafile in sorted(self.dir.glob("seg-*.sha256")):
            npy = shafile.with_suffix(".npy")
            if not npy.is_file():
                continue
            shas = shafile.read_text().split()
            vecs = np.load(npy, mmap_mode="r")
            if vecs.shape != (len(shas), self.dim):
                continue  # a damaged segment: ignored (its images are embedded again)
            seg = len(self._segments)
            self._segments.append(vecs)
            for row, s in enumerate(shas):
                self._where.setdefault(s, (seg, row))

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, sha: str) -> bool:
        return sha in self._where

    def get(self, shas: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """``(vectors, missing)``: float32 ``(len(shas), dim)`` with zeros where not cached, and the positions of
        the missing ones."""
        out = np.zeros((len(shas), self.dim), np.float32)
        missing = []
        for i, s in enumerate(shas):
            w = self._where.get(s)
            if w is None:
                missing.append(i)
            else:
                out[i] = self._segments[w[0]][w[1]]
        self.hits += len(shas) - len(missing)
        self.misses += len(missing)
        return out, missing

    def put(self, shas: Sequence[str], vecs: np.ndarray) -> None:
        """Store new vectors (one segment). Already cached shas are skipped."""
        keep = [i for i, s in enumerate(shas) if s not in self._where]
        if not keep:
            return
        vecs = np.ascontiguousarray(vecs[keep], dtype=np.float32)
        shas = [shas[i] for i in keep]
        if vecs.shape[1] != self.dim:
            raise ValueError(f"cache of dim {self.dim} cannot hold vectors of dim {vecs.shape[1]}")
        name = f"seg-{uuid.uuid4().hex}"
        buf = _npy_bytes(vecs)
        _atomic_write(self.dir / f"{name}.npy", buf)
        _atomic_write(self.dir / f"{name}.sha256", ("\n".join(shas) + "\n").encode())
        seg = len(self._segments)
        self._segments.append(np.load(self.dir / f"{name}.npy", mmap_mode="r"))
        for row, s in enumerate(shas):
            self._where.setdefault(s, (seg, row))

    def embed(self, embedder: Embedder, shas: Sequence[str], images: Callable[[int], Image.Image],
              batch: int = 64) -> np.ndarray:
        """Vectors for ``shas`` (``(n, dim)`` float32): cached ones read, the others computed with ``embedder`` on
        ``images(i)`` (called only for positions that are not cached; one call per distinct sha) and stored."""
        out, missing = self.get(shas)
        first: dict[str, int] = {}
        todo = []
        for i in missing:
            if shas[i] not in first:
                first[shas[i]] = i
                todo.append(i)
        new_s: list[str] = []
        new_v: list[np.ndarray] = []
        for b in range(0, len(todo), batch):
            idx = todo[b : b + batch]
            vecs = embedder.embed([images(i) for i in idx])
            for i, v in zip(idx, vecs):
                out[i] = v
            new_s += [shas[i] for i in idx]
            new_v.append(vecs)
            if len(new_s) >= self.flush_every:
                self.put(new_s, np.concatenate(new_v))
                new_s, new_v = [], []
        if new_s:
            self.put(new_s, np.concatenate(new_v))
        for i in missing:  # repeats of a sha within this call
            if i not in todo:
                out[i] = out[first[shas[i]]]
        return out

    def compact(self) -> None:
        """Merge all segments into one (then remove the old ones)."""
        old = sorted(self.dir.glob("seg-*.sha256"))
        if len(old) < 2:
            return
        shas = sorted(self._where)
        vecs, _ = self.get(shas)
        self.hits -= len(shas)
        self._segments, self._where = [], {}
        self.put(shas, vecs)
        for f in old:
            f.with_suffix(".npy").unlink(missing_ok=True)
            f.unlink(missing_ok=True)
        self._load()


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
