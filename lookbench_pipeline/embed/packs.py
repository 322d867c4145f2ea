"""What the evaluation adds on top of :class:`lookbench_pipeline.embed.cache.EmbeddingCache`: how images are
decoded before they are embedded, and per-file packs. (Formerly ``lookbench_pipeline.embcache``, which still
imports for one release: the packs live in the cache's own folders, so they belong with the cache.)

* Release images (:func:`published_image`) are decoded as a consumer's loader decodes the published bytes
  (``PIL.Image.open``, full size; the Hugging Face ``Image`` feature, look-bench's loader), so our scores equal
  what those tools compute on the same release with the same model.
* Legacy benchmark images (:func:`load_rgb`) are decoded as the soft-negative mining stage decodes them (the
  intake's safe decode, EXIF-oriented, reduced in the JPEG DCT domain to the model's input side), since both key
  the same files' vectors by the same sha256 in the same cache.
* A *file pack* is the ``(rows, dim)`` float32 matrix of one release file, stored in the model's cache folder as
  ``files/<file sha256>.npy``. The file's sha256 (from the manifest) fixes the bytes of every row, so the pack is
  valid exactly as long as the file is: re-scoring a release loads one file per subset and never reads an image.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..images import decode


def input_side(embedder: Any) -> int:
    """The shorter side in pixels an embedder needs (``embedder.input_size``, else 224)."""
    return int(getattr(embedder, "input_size", None) or 224)


def published_image(data: bytes) -> Image.Image:
    """A release image as consumers' loaders open it (the embedder converts it to RGB)."""
    return Image.open(io.BytesIO(data))


def load_rgb(data: bytes, embedder: Any) -> Image.Image:
    """A legacy benchmark image as the mining stage decodes it. Raises ImageRejected (with its reason)."""
    return decode(data, work_side=input_side(embedder)).rgb


def _pack_path(cache: Any, file_sha256: str) -> Path:
    return Path(cache.dir) / "files" / f"{file_sha256}.npy"


def file_pack_load(cache: Any, file_sha256: str, rows: int) -> np.ndarray | None:
    """The pack of a release file, or None when there is none (or it does not have ``rows`` rows of the cache's
    dimension: a damaged pack is ignored and rebuilt). The matrix is memory-mapped read-only (``np.memmap``): scoring
    reads it straight from the page cache instead of copying a gallery's gigabyte into the process first."""
    path = _pack_path(cache, file_sha256)
    if not path.is_file():
        return None
    try:
        vecs = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    return vecs if vecs.shape == (rows, cache.dim) and vecs.dtype == np.float32 else None


def file_pack_save(cache: Any, file_sha256: str, vecs: np.ndarray) -> None:
    """Store a release file's matrix (written to a temporary file, then renamed: never half a pack)."""
    path = _pack_path(cache, file_sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npy")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.ascontiguousarray(vecs, dtype=np.float32))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
