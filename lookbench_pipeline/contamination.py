"""Contamination: new images that are (near) copies of images already published or of legacy benchmarks.

A persistent hash index (``contamination_index`` table, Parquet at ``<data_dir>/contamination/index.parquet``)
holds the sha256, pHash (same method as the intake) and colour signature of every image of

* legacy benchmarks read from their own on-disk formats (:func:`iter_source`):
  ``fashion200k`` (``labels/*_detect_all.txt``: tab-separated image path, detection score, description; images
  under ``women/<category>/<subcategory>/<product_id>/``), ``fashion200k_parquet`` (its Parquet copy, e.g.
  ``Marqo/fashion200k``: one file or a folder of ``*.parquet`` with columns ``image`` (the Hugging Face Image struct
  ``{bytes, path}``, or binary), ``category1``..``category3``, ``text``, ``item_ID``), ``deepfashion_inshop`` (``Eval/list_eval_partition.txt``:
  a count line, a header, then ``image_name item_id evaluation_status``), ``deepfashion2`` (``image/*.jpg`` with
  ``annos/*.json``), ``folder`` (any images under a folder);
* earlier LookBench releases in the object store (their published image bytes).

The index is incremental: a file already indexed with the same :func:`memo.file_stamp` (size, modification and
status-change times in ns, inode) is not read again; a file copied over with its size and modification time kept
is read again. A new image
matching an index entry within the Hamming threshold (colour-confirmed, as in dedup), or the entry's left-right
mirror image (the ``mirrored`` signatures: a flipped copy, as training sets are augmented), is contamination,
recorded with the matching source and path; the release keeps it out of queries.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import ImageOps

import numpy as np

from . import schemas
from .config import ImageConfig, LegacySource

from .dedup import confirmed_by_colour, cutout_pairs, hex_to_u64, near_pairs_mih, popcount64
from .foreground import MAX_FOREGROUND_DELTA_E, block_codes, foreground_signature
from .images import PHASH_METHOD, PHASH_WORK_SIDE, ImageRejected, color_signature, decode, phash_hex
from .memo import file_stamp
from .releases.reader import list_releases, read_file
from .store import ObjectStore

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp"}


class LegacyFormatError(ValueError):
    """A legacy benchmark folder does not have the layout its kind requires (the message says what is missing)."""


@dataclass
class SourceImage:
    """One image of a legacy benchmark: where its bytes are, its path within the source, and what the source
    says about it (``description``; ``categories``, most general first)."""

    path: Path
    rel: str
    item_id: str | None
    description: str | None = None
    categories: tuple[str, ...] = ()
    data: bytes | None = None  # the bytes, when the source holds them (a Parquet copy); else read from ``path``

    def read_bytes(self) -> bytes:
        """The image file's bytes. Raises OSError (e.g. FileNotFoundError) when a file is missing."""
        return self.data if self.data is not None else self.path.read_bytes()


def _fashion200k(root: Path, split: str | None = None) -> Iterator[SourceImage]:
    """Fashion200K's images; ``split`` (``train`` / ``test``) reads only ``labels/*_<split>_detect_all.txt``."""
    pattern = f"*_{split}_detect_all.txt" if split else "*_detect_all.txt"
    labels = sorted((root / "labels").glob(pattern))
    if not labels:
        raise LegacyFormatError(f"{root}: no labels/{pattern} (Fashion200K layout)")
    seen = set()
    for lf in labels:
        label_category = lf.name.split("_")[0]  # dress | jacket | pants | skirt | top
        for n, line in enumerate(lf.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < 3:
                raise LegacyFormatError(f"{lf}:{n}: expected 'path<TAB>score<TAB>description'")
            rel = parts[0].strip()
            if rel in seen:
                continue
            seen.add(rel)
            segs = rel.split("/")
            # women/<category>/<subcategory>/<product_id>/<file>
            cats = tuple(c.replace("_", " ") for c in [label_category, *segs[1:3]] if c)
            yield SourceImage(root / rel, rel, segs[3] if len(segs) > 4 else None, parts[2].strip() or None, cats)


F200K_PARQUET_COLUMNS = ("image", "category1", "category2", "category3", "text", "item_ID")


def _fashion200k_parquet(root: Path) -> Iterator[SourceImage]:
    import pyarrow.parquet as pq

    files = [root] if root.is_file() else sorted(root.rglob("*.parquet"))
    if not files:
        raise LegacyFormatError(f"{root}: no *.parquet files (Fashion200K Parquet copy)")
    for f in files:
        pf = pq.ParquetFile(f)
        missing = [c for c in F200K_PARQUET_COLUMNS if c not in pf.schema_arrow.names]
        if missing:
            raise LegacyFormatError(f"{f}: missing columns {missing}; a Fashion200K Parquet copy has "
                                    f"{list(F200K_PARQUET_COLUMNS)}")
        name = f.relative_to(root).as_posix() if f != root else f.name
        row = 0
        for batch in pf.iter_batches(batch_size=256, columns=list(F200K_PARQUET_COLUMNS)):
            for r in batch.to_pylist():
                img = r["image"]
                data = img.get("bytes") if isinstance(img, dict) else img
                cats = tuple(str(r[c]) for c in ("category1", "category2", "category3") if r[c])
                item = r["item_ID"]
                yield SourceImage(f, f"{name}#{row}", None if item is None else str(item), r["text"] or None,
                                  cats, data if data is not None else b"")
                row += 1


def _deepfashion_inshop(root: Path) -> Iterator[SourceImage]:
    part = root / "Eval" / "list_eval_partition.txt"
    if not part.is_file():
        raise LegacyFormatError(f"{root}: no Eval/list_eval_partition.txt (DeepFashion In-shop layout)")
    lines = part.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines[2:], 3):
        parts = line.split()
        if len(parts) != 3:
            raise LegacyFormatError(f"{part}:{n}: expected 'image_name item_id evaluation_status'")
        yield SourceImage(root / parts[0], parts[0], parts[1])


def _deepfashion2(root: Path) -> Iterator[SourceImage]:
    imgs = sorted((root / "image").glob("*.jpg"))
    if not (root / "image").is_dir():
        raise LegacyFormatError(f"{root}: no image/ folder (DeepFashion2 layout)")
    for p in imgs:
        yield SourceImage(p, f"image/{p.name}", None)


def _folder(root: Path) -> Iterator[SourceImage]:
    if not root.is_dir():
        raise LegacyFormatError(f"{root} is not a folder")
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES:
            yield SourceImage(p, p.relative_to(root).as_posix(), None)


READERS = {"fashion200k": _fashion200k, "fashion200k_parquet": _fashion200k_parquet,
           "deepfashion_inshop": _deepfashion_inshop,
           "deepfashion2": _deepfashion2, "folder": _folder}


def iter_source(kind: str, root: Path) -> Iterator[SourceImage]:
    """The images of a legacy benchmark in its own format. Raises LegacyFormatError (or KeyError: unknown kind)."""
    return READERS[kind](Path(root))


def _row(source: str, rel: str, item_id: str | None, data: bytes, stamp: str, cfg: ImageConfig | None,
         mirrored: bool = True) -> dict | None:
    """An index row of one image (``None`` when the intake's decoder rejects its bytes, logged). With
    ``mirrored``, also the signatures of its left-right mirror image (``mirrored``: pHash, colour and foreground
    signatures), so that a mirrored copy of it is found (:func:`find_contamination`)."""
    try:
        dec = decode(data, cfg, work_side=PHASH_WORK_SIDE)
    except ImageRejected as exc:
        log.info("index: %s/%s not indexed: %s", source, rel, exc)
        return None
    row = {"source": source, "path": rel, "item_id": item_id, "image_sha256": hashlib.sha256(data).hexdigest(),
           "phash": phash_hex(dec.rgb), "phash_method": PHASH_METHOD, "color_signature": color_signature(dec.rgb),
           "fg_signature": foreground_signature(dec.rgb), "block_codes": block_codes(dec.rgb),
           "flags": dec.flags, "stamp": stamp}
    if mirrored:
        m = ImageOps.mirror(dec.rgb)
        row["mirrored"] = {"phash": phash_hex(m), "color_signature": color_signature(m),
                           "fg_signature": foreground_signature(m)}
    return row


def _current(row: dict) -> bool:
    """Whether an index row has every signature this version computes (rows of an older index are read again)."""
    return bool(row.get("fg_signature")) and bool(row.get("mirrored"))


def update_index(index_path: Path, sources: list[LegacySource], store: ObjectStore | None = None,
                 exclude_releases: set[str] | frozenset[str] = frozenset(), cfg: ImageConfig | None = None,
                 ) -> tuple[pa.Table, dict]:
    """Bring the index up to date with ``sources`` and (when ``store`` is given) the published releases not in
    ``exclude_releases`` (earlier builds of the same window are predecessors, not leaks). Returns
    ``(index, counts)`` with per-source counts ``<source>.indexed`` and ``<source>.unreadable`` (a file that
    cannot be read, or whose bytes the intake rejects, each logged with its reason): indexed + unreadable = the
    files the source lists. Raises :class:`LegacyFormatError` for a source whose layout is not its kind's."""
    cfg = cfg or ImageConfig()
    old = {(r["source"], r["path"]): r for r in pq.read_table(index_path).to_pylist()} if index_path.is_file() else {}
    rows: dict[tuple[str, str], dict] = {}
    counts: dict[str, int] = {}
    from .logs import Progress

    for src in sources:
        n_ok = n_bad = 0
        prog = Progress(f"contamination index {src.name}", 0, "files")
        for im in iter_source(src.kind, src.path):
            prog.update()
            try:
                stamp = file_stamp(im.path.stat())
                prev = old.get((src.name, im.rel))
                if prev and prev["stamp"] == stamp and prev["phash_method"] == PHASH_METHOD and _current(prev):
                    rows[(src.name, im.rel)] = prev
                    n_ok += 1
                    continue
                data = im.read_bytes()
            except OSError as exc:  # missing, a folder, no permission, an I/O error, deleted after the listing
                log.warning("index: %s/%s not indexed: cannot read it: %s", src.name, im.rel, exc)
                n_bad += 1
                continue
            row = _row(src.name, im.rel, im.item_id, data, stamp, cfg)
            if row is None:
                n_bad += 1
            else:
                rows[(src.name, im.rel)] = row
                n_ok += 1
        prog.close()
        counts[f"{src.name}.indexed"] = n_ok
        counts[f"{src.name}.unreadable"] = n_bad
    if store is not None:
        for version in list_releases(store):
            if version in exclude_releases:
                continue
            name = f"release:{version}"
            prior = {k: v for k, v in old.items() if k[0] == name}
            if prior and all(_current(v) for v in prior.values()):
                rows.update(prior)
                counts[f"{name}.indexed"] = len(prior)
                continue
            n = n_bad = 0
            for subset, role in _release_files(store, version):
                t = read_file(store, version, subset, role)
                for r in t.select(["image", "item_ID", "sample_id"]).to_pylist():
                    rel = f"{subset}/{role}/{r['sample_id']}"
                    row = _row(name, rel, r["item_ID"], r["image"]["bytes"], "release", cfg)
                    if row:
                        rows[(name, rel)] = row
                        n += 1
                    else:
                        n_bad += 1
            counts[f"{name}.indexed"] = n
            counts[f"{name}.unreadable"] = n_bad
    table = schemas.from_rows([rows[k] for k in sorted(rows)], schemas.CONTAMINATION_INDEX)
    index_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, index_path)
    return table, counts


def _release_files(store: ObjectStore, version: str) -> list[tuple[str, str]]:
    from .releases.reader import read_manifest

    out = []
    for key in read_manifest(store, version)["files"]:
        subset, role = key.removesuffix(".parquet").split("/")
        out.append((subset, role))
    return sorted(out)


def find_contamination(images: pa.Table, index: pa.Table, threshold: int, max_color_diff: float,
                       max_foreground_delta_e: float = MAX_FOREGROUND_DELTA_E, cutouts: bool = True) -> pa.Table:
    """New images that match the index: one ``contamination`` row per (image, source), the closest match.

    Exact matches (same sha256) have distance 0 and ``kind = exact``; others are pHash-near (<= ``threshold``
    bits) and colour-confirmed (:func:`lookbench_pipeline.dedup.confirmed_by_colour`), ``kind = near``; a new image
    near the left-right mirror image of an indexed one (the index row's ``mirrored`` signatures, colour-confirmed
    the same way) is ``kind = mirrored`` (training sets are augmented by flipping, and a flipped copy is a leak; an
    index row without them, of an index built before they existed, is not searched so); with ``cutouts``, a new
    image that is a background-removed cut-out of an indexed one, or the photograph an indexed cut-out was made
    from (:func:`lookbench_pipeline.dedup.cutout_pairs`), ``kind = cutout`` with its pHash distance. An exact match
    beats a near one, a near one a mirrored one, a mirrored one a cut-out.
    """
    new = images.to_pylist()
    old = index.to_pylist()
    if not new or not old:
        return schemas.empty(schemas.CONTAMINATION)
    best: dict[tuple[str, str], dict] = {}
    by_sha: dict[str, int] = {}
    for j, r in enumerate(old):
        by_sha.setdefault(r["image_sha256"], j)
    candidates = [(k, by_sha[r["image_sha256"]], 0) for k, r in enumerate(new) if r["image_sha256"] in by_sha]
    # near matches: distinct hashes of non-uniform images (blank images all share a hash and prove nothing)
    ok_new = [k for k, r in enumerate(new) if "uniform" not in (r.get("flags") or [])]
    ok_old = [j for j, r in enumerate(old) if "uniform" not in (r.get("flags") or [])]
    mirrors = {j: {**old[j]["mirrored"], "flags": old[j].get("flags")} for j in ok_old if old[j].get("mirrored")}
    near: list[tuple[int, int, int, str]] = []
    for kind, old_hashes in (("near", {j: old[j]["phash"] for j in ok_old}),
                             ("mirrored", {j: m["phash"] for j, m in mirrors.items()})):
        near.extend((k, j, d, kind) for k, j, d in _near(new, ok_new, old_hashes, threshold))
    rank = {"exact": 0, "near": 1, "mirrored": 2, "cutout": 3}
    found = [(i, j, 0, "exact") for i, j, _ in candidates]
    for i, j, d, kind in near:
        a, b = new[i], (old[j] if kind == "near" else mirrors[j])
        if a["image_sha256"] == old[j]["image_sha256"]:
            found.append((i, j, 0, "exact"))  # the same bytes under another source
        elif confirmed_by_colour(a, b, max_color_diff, max_foreground_delta_e):
            found.append((i, j, d, kind))
    if cutouts:
        n = len(new)
        for x, y in cutout_pairs(new + old, split=n):
            i, j = (x, y - n) if x < n else (y, x - n)
            d = int(popcount64(hex_to_u64([new[i]["phash"]]) ^ hex_to_u64([old[j]["phash"]]))[0])
            found.append((i, j, d, "cutout"))
    for i, j, d, kind in found:
        a, b = new[i], old[j]
        key = (a["image_sha256"], b["source"])
        if key not in best or (rank[kind], d) < (rank[best[key]["kind"]], best[key]["hamming"]):
            best[key] = {"image_sha256": a["image_sha256"], "source": b["source"], "matched_path": b["path"],
                         "matched_item_id": b["item_id"], "hamming": d, "kind": kind}
    return schemas.from_rows([best[k] for k in sorted(best)], schemas.CONTAMINATION)


def _near(new: list[dict], ok_new: list[int], old_hashes: dict[int, str], threshold: int
          ) -> list[tuple[int, int, int]]:
    """``(k, j, distance)`` for the new rows ``ok_new`` whose pHash is within ``threshold`` bits of the hash of
    index row ``j`` (``old_hashes``: row -> 16 hex digits), by multi-index hashing over the distinct hashes; one
    index row per distinct index hash (the closest legacy copy per new image is enough)."""
    if not ok_new or not old_hashes:
        return []
    ok_old = list(old_hashes)
    u_new, inv_new = np.unique(hex_to_u64([new[k]["phash"] for k in ok_new]), return_inverse=True)
    u_old, inv_old = np.unique(hex_to_u64([old_hashes[j] for j in ok_old]), return_inverse=True)
    members_new: list[list[int]] = [[] for _ in u_new]
    first_old: dict[int, int] = {}
    for k, u in zip(ok_new, inv_new.tolist()):
        members_new[u].append(k)
    for j, u in zip(ok_old, inv_old.tolist()):
        first_old.setdefault(u, j)
    n_u = len(u_new)
    out = []
    for a, b, d in near_pairs_mih(np.concatenate([u_new, u_old]), threshold):
        if a < n_u <= b:
            out.extend((k, first_old[b - n_u], int(d)) for k in members_new[a])
    return out


def rates(images: pa.Table, contamination: pa.Table) -> dict[str, float]:
    """Share of new images contaminated, per source and overall."""
    n = max(images.num_rows, 1)
    out: dict[str, float] = {}
    rows = contamination.to_pylist()
    for src in sorted({r["source"] for r in rows}):
        out[src] = len({r["image_sha256"] for r in rows if r["source"] == src}) / n
    out["any"] = len({r["image_sha256"] for r in rows}) / n
    return out
