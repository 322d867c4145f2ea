"""Small releases with real JPEG pictures for the publishing and consumer tests (no crawl needed)."""

from __future__ import annotations

import hashlib
import io
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from lookbench_pipeline import schemas
from lookbench_pipeline.embed import HsvHogEmbedder
from lookbench_pipeline.embed.packs import published_image
from lookbench_pipeline.releases import ReleaseTables
from lookbench_pipeline.windows import Window

WINDOW = Window(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 7, 1, tzinfo=timezone.utc))
CATEGORIES = ["top", "dress", "skirt"]
COLORS = ["red", "blue", "green", "black"]


def jpeg(seed: int, px: int = 40) -> bytes:
    """A JPEG whose pixels depend on ``seed``: a base colour plus noise (``px`` x ``px`` pixels)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=3)
    arr = np.clip(base + rng.normal(0, 40, size=(px, px, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def make_release(version: str = "v20260701", items: range = range(8), px: int = 40, gallery_px: int | None = None,
                 street_every: int = 3, category_of=None) -> ReleaseTables:
    """A release whose ``real_studio_flat`` has, per item, one gallery and one query picture, and whose
    ``real_streetlook`` has a query for every ``street_every``-th item (0: no street-look subset; its gallery is the
    same catalogue). Pictures are ``px`` pixels square (gallery pictures ``gallery_px`` when given: a 512-pixel
    noise JPEG is about 240 kB, for files large enough to be uploaded in several parts).

    Item ``i``'s labels are deterministic in ``i`` (``category_of(i)`` picks the category when given), so two
    calls with overlapping ``items`` describe the same items.
    """
    category_of = category_of or (lambda i: CATEGORIES[i % len(CATEGORIES)])
    t0 = datetime(2026, 2, 1, 8, 30, 0, 123456, tzinfo=timezone.utc)
    gallery, studio_q, street_q = [], [], []
    for i in items:
        cat = category_of(i)
        attrs = [{"name": "color", "value": COLORS[i % len(COLORS)]},
                 {"name": "sleeve_length", "value": "short" if i % 2 else "long"}]
        base = {"item_ID": f"item{i:03d}", "category": cat, "main_attribute": f"color: {attrs[0]['value']}",
                "other_attributes": f"sleeve_length: {attrs[1]['value']}", "attributes": attrs,
                "annotator": "test/v1", "site": "demo", "crawled_at": t0 + timedelta(days=i),
                "first_seen_at": t0 + timedelta(days=i, microseconds=i)}
        for role, subset, seed, rows, task, diff in (
                ("gallery", "real_studio_flat", 1000 + i, gallery, "single-item", "easy"),
                ("query", "real_studio_flat", 2000 + i, studio_q, "single-item", "easy"),
                ("query", "real_streetlook", 3000 + i, street_q, "multi-item", "hard")):
            if rows is street_q and (not street_every or i % street_every):
                continue
            side = gallery_px if (gallery_px and role == "gallery") else px
            data = jpeg(seed, side)
            sha = hashlib.sha256(data).hexdigest()
            rows.append({**base, "image": {"bytes": data, "path": f"{sha}.jpg"}, "task": task, "difficulty": diff,
                         "sample_id": hashlib.sha1(f"{role}{subset}{i}".encode()).hexdigest()[:16],
                         "subset": subset, "role": role, "image_sha256": sha, "width": side, "height": side,
                         "look_id": f"look{i}" if subset == "real_streetlook" else None,
                         "box": [1.0, 2.0, 30.5, 38.0] if subset == "real_streetlook" else None,
                         "source_url": f"https://demo.lookbench.invalid/p/{i}/{seed}.jpg"})
    files = {}
    for subset, qs in (("real_studio_flat", studio_q), ("real_streetlook", street_q)):
        if qs:
            files[(subset, "query")] = schemas.from_rows(qs, schemas.RELEASE)
            files[(subset, "gallery")] = schemas.from_rows([{**g, "subset": subset} for g in gallery], schemas.RELEASE)
    n_q = len(studio_q) + len(street_q)
    counts = {"candidates": n_q + len(gallery), "query_rows": n_q, "gallery_rows_distinct": len(gallery),
              "rejected": 0, "rejected_by_reason": {},
              "per_file_rows": {f"{s}/{r}": t.num_rows for (s, r), t in sorted(files.items())}}
    return ReleaseTables(version, WINDOW, files, counts=counts)


def with_noise(rel, n: int = 5):
    """The release plus a noise gallery of ``n`` distractors (items of no query), as the negatives stage adds."""
    t0 = datetime(2025, 6, 1, tzinfo=timezone.utc)
    rows = []
    for i in range(n):
        data = jpeg(9000 + i)
        sha = hashlib.sha256(data).hexdigest()
        rows.append({"image": {"bytes": data, "path": f"{sha}.jpg"}, "item_ID": f"noise{i}", "category": "top",
                     "main_attribute": "color: red", "other_attributes": "sleeve_length: long",
                     "attributes": [{"name": "color", "value": "red"}, {"name": "sleeve_length", "value": "long"}],
                     "annotator": "test/v1", "site": "legacy:fashion200k", "crawled_at": t0, "first_seen_at": t0,
                     "task": "distractor", "difficulty": "n/a", "sample_id": hashlib.sha1(f"noise{i}".encode()).hexdigest()[:16],
                     "subset": "noise", "role": "gallery", "image_sha256": sha, "width": 40, "height": 40,
                     "look_id": None, "box": None, "source_url": f"fashion200k/{i}.jpg"})
    rel.files[("noise", "gallery")] = schemas.from_rows(rows, schemas.RELEASE)
    return rel


def export_embeddings(folder, path, fmt="parquet"):
    """The baseline's vectors of every row of the pulled release (query, gallery and noise files), keyed by
    sample_id, written as a researcher would: one row per distinct sample_id."""
    emb = HsvHogEmbedder()
    ids, vecs = [], []
    for f in sorted(folder.rglob("*.parquet")):
        if f.name == "changes.parquet":
            continue
        t = pq.read_table(f, columns=["sample_id", "image"])
        for sid, img in zip(t["sample_id"].to_pylist(), t["image"].to_pylist()):
            if sid not in ids:
                ids.append(sid)
                vecs.append(emb.embed([published_image(img["bytes"])])[0])
    vecs = np.stack(vecs).astype(np.float32)
    if fmt == "parquet":
        pq.write_table(pa.table({"sample_id": ids, "embedding": pa.FixedSizeListArray.from_arrays(
            pa.array(vecs.ravel(), pa.float32()), vecs.shape[1])}), path)
    elif fmt == "npz":
        np.savez(path, sample_id=np.array(ids), embedding=vecs)
    else:
        np.save(path, vecs)
        path.with_suffix(".ids.txt").write_text("\n".join(ids) + "\n")
    return ids, vecs
