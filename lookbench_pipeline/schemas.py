"""The data contracts: one explicit pyarrow schema per table, and the only place they are defined.

Every stage reads and writes these tables through :func:`conform`, so a column that is missing, misnamed or of the
wrong type is an error at the boundary, not a surprise three stages later.

Timestamps are ``timestamp[us, tz=UTC]`` everywhere (microseconds since the Unix epoch, UTC). A value in another
time zone is stored as the same instant in UTC. A value with sub-microsecond digits (a ``pandas.Timestamp`` or an
Arrow ``timestamp[ns]`` with nanoseconds) is refused with :class:`SchemaError`, never truncated silently: round it
where it is produced if microseconds are enough. Parquet keeps these as ``TIMESTAMP(isAdjustedToUTC=true, MICROS)``,
which DuckDB reads as ``TIMESTAMPTZ`` and writes back unchanged.

Tables (stage that writes it -> table):

* crawl -> ``products``, ``looks``: what the shops publish, with ``crawled_at`` / ``first_seen_at`` / ``last_seen_at``.
* images -> ``drop_items``: images that came from an image drop folder, with the item they show.
* crawl -> ``image_downloads``: every image URL the crawl tried, with the stored file or the failure reason.
* crawl -> ``crawl_log``: every page the spider handled, with its outcome (kept or rejected and why).
* images -> ``image_refs``: every image reference (a URL on a product or look page, or a file in an image drop) and
  its intake outcome; ``accepted`` rows carry the sha256 of the original bytes.
* images -> ``images``: one row per distinct accepted image (sha256), with its decoded size and perceptual hash.
* dedup -> ``image_clusters``: every accepted image mapped to its duplicate cluster and representative.
* dedup -> ``contamination_index`` (legacy benchmarks and earlier releases) and ``contamination`` (new images
  that match it, with the source).
* attributes -> ``annotations``: category and attributes per item, with the annotator that produced them.
* detect -> ``detections``: every box the garment detector gave on a street-look image (kept with its crop and
  matched product, or dropped with a reason).
* release -> ``query`` / ``gallery``: the published LookBench files (see :data:`RELEASE`).
* release -> ``changes.parquet``: what changed since the previous release (see :data:`RELEASE_CHANGES`).
* evaluate -> ``scores``: one row per (model, subset, metric).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
"""Timestamp type of every table: microseconds, UTC."""

ATTRIBUTE = pa.struct([("name", pa.string()), ("value", pa.string())])
"""One attribute label: ``{name, value}``; a list of these is how attributes are stored (a Parquet map is not read
by every consumer, a list of structs is)."""

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
"""The Hugging Face ``datasets.Image`` storage struct, so ``load_dataset("parquet")`` decodes the column as images."""

BOX = pa.list_(pa.float32(), 4)
"""A box in pixels on the EXIF-transposed image: ``[x1, y1, x2, y2]``."""

PRODUCTS = pa.schema(
    [
        ("product_id", pa.string()),  # stable id: sha1 of site + sku (or URL path), independent of host/port
        ("site", pa.string()),
        ("url", pa.string()),
        ("title", pa.string()),
        ("description", pa.string()),
        ("brand", pa.string()),
        ("sku", pa.string()),
        ("price", pa.float64()),
        ("currency", pa.string()),  # ISO 4217 where known, else the symbol as printed
        ("color", pa.string()),
        ("material", pa.string()),
        ("category_text", pa.string()),  # the shop's own category / breadcrumb text
        ("image_urls", pa.list_(pa.string())),
        ("extracted_from", pa.string()),  # json-ld | microdata | rdfa | opengraph | rules
        ("crawled_at", TS),
        ("first_seen_at", TS),
        ("last_seen_at", TS),
        ("disappeared_at", TS),  # state only: first crawl that no longer found it (null while present)
    ]
)

LOOKS = pa.schema(
    [
        ("look_id", pa.string()),
        ("site", pa.string()),
        ("url", pa.string()),
        ("image_url", pa.string()),
        ("product_urls", pa.list_(pa.string())),
        ("product_ids", pa.list_(pa.string())),
        ("crawled_at", TS),
        ("first_seen_at", TS),
        ("last_seen_at", TS),
        ("disappeared_at", TS),
    ]
)

DROP_ITEMS = pa.schema(
    [
        ("drop_image_id", pa.string()),  # sha1 of drop name + relative path
        ("item_id", pa.string()),
        ("drop", pa.string()),
        ("path", pa.string()),  # absolute path of the file
        ("subset", pa.string()),
        ("role", pa.string()),  # query | gallery
        ("title", pa.string()),
        ("description", pa.string()),
        ("first_seen_at", TS),
    ]
)

CRAWL_LOG = pa.schema(
    [
        ("site", pa.string()),
        ("url", pa.string()),
        ("status", pa.int32()),  # HTTP status, 0 when no response
        ("outcome", pa.string()),  # product | look | listing | rejected
        ("reason", pa.string()),  # why rejected (no_structured_data, http_404, robots_disallowed...)
        ("crawled_at", TS),
    ]
)

IMAGE_DOWNLOADS = pa.schema(
    [
        ("site", pa.string()),
        ("url", pa.string()),
        ("stored_path", pa.string()),  # absolute path of the downloaded bytes; null when the download failed
        ("reason", pa.string()),  # why it failed (host_not_allowed, robots_disallowed, http_error, fetch_error...)
    ]
)

IMAGE_REFS = pa.schema(
    [
        ("ref_id", pa.string()),  # sha1 of owner_type/owner_id/position
        ("owner_type", pa.string()),  # product | look | drop
        ("owner_id", pa.string()),  # product_id, look_id, or drop item id
        ("position", pa.int32()),  # order of the image on its page (0 = main image)
        ("source", pa.string()),  # URL or file path the bytes came from
        ("site", pa.string()),
        ("status", pa.string()),  # accepted | rejected
        ("reason", pa.string()),  # rejection reason (see lookbench_pipeline.images.Reject), null when accepted
        ("image_sha256", pa.string()),  # of the original bytes; null when nothing was fetched
        ("first_seen_at", TS),
    ]
)

IMAGES = pa.schema(
    [
        ("image_sha256", pa.string()),
        ("store_key", pa.string()),  # object-store key of the original bytes
        ("format", pa.string()),  # JPEG | PNG | WEBP | GIF ... as Pillow detects it (never the file extension)
        ("width", pa.int32()),  # pixels, after EXIF orientation
        ("height", pa.int32()),
        ("n_frames", pa.int32()),
        ("flags", pa.list_(pa.string())),  # animated | uniform | exif_rotated | had_alpha | cmyk | 16bit ...
        ("phash", pa.string()),  # 64-bit pHash as 16 hex digits, method in phash_method
        ("phash_method", pa.string()),
        ("color_signature", pa.string()),  # 8x8 RGB thumbnail, 384 hex digits: pHash is colour-blind
        ("first_seen_at", TS),
    ]
)

IMAGE_CLUSTERS = pa.schema(
    [
        ("image_sha256", pa.string()),
        ("cluster_id", pa.string()),  # the representative's sha256
        ("is_representative", pa.bool_()),
        ("duplicate_kind", pa.string()),  # unique | exact | near
        ("hamming_to_representative", pa.int32()),
    ]
)

CONTAMINATION_INDEX = pa.schema(
    [
        ("source", pa.string()),  # legacy benchmark name, or "release:vYYYYMMDD"
        ("path", pa.string()),  # path within the source (or subset/role/sample_id of a release)
        ("item_id", pa.string()),
        ("image_sha256", pa.string()),
        ("phash", pa.string()),
        ("phash_method", pa.string()),
        ("color_signature", pa.string()),
        ("flags", pa.list_(pa.string())),
        ("stamp", pa.string()),  # "size:mtime" of the file when indexed (incremental re-indexing)
    ]
)

CONTAMINATION = pa.schema(
    [
        ("image_sha256", pa.string()),  # the new image
        ("source", pa.string()),
        ("matched_path", pa.string()),
        ("matched_item_id", pa.string()),
        ("hamming", pa.int32()),  # pHash bits; 0 for an exact (sha256) match
        ("kind", pa.string()),  # exact | near
    ]
)

ANNOTATIONS = pa.schema(
    [
        ("item_id", pa.string()),  # product_id or drop item id
        ("status", pa.string()),  # labelled | rejected
        ("reason", pa.string()),
        ("category", pa.string()),
        ("attributes", pa.list_(ATTRIBUTE)),
        ("annotator", pa.string()),  # name/version of what produced the labels
        ("taxonomy_version", pa.string()),
    ]
)

DETECTIONS = pa.schema(
    [
        ("detection_id", pa.string()),  # sha1 of owner, image, detector weights and the box's rank
        ("owner_type", pa.string()),  # look (a crawled "shop the look" page) | drop (a street photo of an image drop)
        ("owner_id", pa.string()),  # look_id or drop_image_id
        ("image_sha256", pa.string()),  # the street-look image (original bytes); boxes are on it, EXIF-transposed
        ("item_index", pa.int32()),  # the item's number in its image (kept boxes by descending score); null if dropped
        ("model_class", pa.string()),  # the detector's class name
        ("categories", pa.list_(pa.string())),  # taxonomy categories the class maps to (config detect.classes)
        ("score", pa.float32()),  # detector confidence in [0, 1]
        ("raw_box", BOX),  # as the detector gave it
        ("box", BOX),  # clipped to the image; null when dropped
        ("status", pa.string()),  # matched | unlabelled | dropped
        ("reason", pa.string()),  # dropped: degenerate, outside_image, too_small, class_ignored; unlabelled: why
        ("item_id", pa.string()),  # the linked product (or drop item) the box shows, when matched
        ("similarity", pa.float32()),  # cosine, crop vs the item's gallery image (baseline embedder); best when not
        ("crop_sha256", pa.string()),  # the crop: a derived JPEG in the store at derived/<sha[:2]>/<sha>
        ("crop_width", pa.int32()),  # pixels
        ("crop_height", pa.int32()),
        ("detector_sha256", pa.string()),  # sha256 of the weights file
    ]
)

RELEASE = pa.schema(
    [
        # The columns the public LookBench loader reads.
        ("image", IMAGE),
        ("item_ID", pa.string()),
        ("category", pa.string()),
        ("main_attribute", pa.string()),  # "name: value" of the category's main attribute
        ("other_attributes", pa.string()),  # "name: value; name: value" for the rest
        ("task", pa.string()),  # single-item | multi-item
        ("difficulty", pa.string()),  # easy | medium | hard
        # Ours.
        ("sample_id", pa.string()),
        ("subset", pa.string()),
        ("role", pa.string()),  # query | gallery
        ("attributes", pa.list_(ATTRIBUTE)),
        ("annotator", pa.string()),
        ("image_sha256", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("look_id", pa.string()),
        ("box", BOX),
        ("item_index", pa.int32()),  # street looks with detection: the item's number in its look (see DETECTIONS)
        ("site", pa.string()),
        ("source_url", pa.string()),
        ("crawled_at", TS),
        ("first_seen_at", TS),
    ]
)

# Parquet key-value metadata that Hugging Face `datasets` reads (``Features.from_arrow_schema``): the ``image`` struct
# is an ``Image`` feature, so ``load_dataset("parquet", ...)`` decodes it to a PIL image; every other column's
# feature follows from its Arrow type.
HF_FEATURES_METADATA = {b"huggingface": json.dumps({"info": {"features": {"image": {"_type": "Image"}}}}).encode()}
RELEASE = RELEASE.with_metadata(HF_FEATURES_METADATA)

RELEASE_CHANGES = pa.schema(
    [
        # One row per change between a release and the previous published one (release/changes.parquet).
        ("version", pa.string()),
        ("previous_version", pa.string()),  # null for the first release (every item is then "added")
        ("change", pa.string()),  # item_added | item_retired | category_share | attribute_share
        ("subset", pa.string()),
        ("role", pa.string()),  # query | gallery
        ("item_ID", pa.string()),  # item_added / item_retired rows; null otherwise
        ("category", pa.string()),  # the item's / the counted category
        ("attribute", pa.string()),  # attribute_share rows: attribute name
        ("value", pa.string()),  # attribute_share rows: attribute value
        ("previous_count", pa.int64()),  # rows (samples) in the previous release's file
        ("current_count", pa.int64()),
        # share_ rows: count / rows of the file (category_share) or of the category in the file (attribute_share),
        # in [0, 1]; 0 when that denominator is 0. Item rows: null.
        ("previous_share", pa.float64()),
        ("current_share", pa.float64()),
        ("share_delta", pa.float64()),  # current_share - previous_share
    ]
)

SCORES = pa.schema(
    [
        ("release", pa.string()),
        ("model", pa.string()),
        ("subset", pa.string()),  # a subset name or "overall"
        ("metric", pa.string()),  # coarse_recall@1, fine_recall@5, ndcg@5 ...
        ("value", pa.float64()),  # in [0, 1]
        ("ci_low", pa.float64()),  # 95% percentile-bootstrap interval over queries (metrics.bootstrap_ci)
        ("ci_high", pa.float64()),
        ("n_queries", pa.int64()),
        ("cutoff", pa.string()),  # ISO date, or null for no cutoff
    ]
)

TABLES: dict[str, pa.Schema] = {
    "products": PRODUCTS,
    "looks": LOOKS,
    "crawl_log": CRAWL_LOG,
    "drop_items": DROP_ITEMS,
    "image_downloads": IMAGE_DOWNLOADS,
    "image_refs": IMAGE_REFS,
    "images": IMAGES,
    "image_clusters": IMAGE_CLUSTERS,
    "contamination_index": CONTAMINATION_INDEX,
    "contamination": CONTAMINATION,
    "annotations": ANNOTATIONS,
    "detections": DETECTIONS,
    "release": RELEASE,
    "release_changes": RELEASE_CHANGES,
    "scores": SCORES,
}


class SchemaError(ValueError):
    """A table does not match its contract (missing column, or a value that cannot be cast)."""


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Return ``table`` with exactly the columns of ``schema``, in order and cast to its types.

    Raises:
        SchemaError: a column of the schema is missing, or a value cannot be cast losslessly.
    """
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise SchemaError(f"missing columns {missing}; table has {table.column_names}")
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"cannot cast to schema: {exc}") from exc


def from_rows(rows: Iterable[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Build a table of ``schema`` from dict rows; absent keys become null.

    Raises:
        SchemaError: a value does not fit its column's type.
    """
    rows = list(rows)
    ts_fields = [f.name for f in schema if pa.types.is_timestamp(f.type) and f.type.unit == "us"]
    for i, r in enumerate(rows):
        for name in ts_fields:
            v = r.get(name)
            if v is not None and type(v) is not datetime:
                _check_microseconds(name, i, v)
    try:
        return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"rows do not fit the schema: {exc}") from exc


def _check_microseconds(name: str, row: int, v: Any) -> None:
    """Refuse a timestamp with sub-microsecond digits (pyarrow would drop them silently from a pandas.Timestamp)."""
    ns = getattr(v, "nanosecond", 0)  # pandas.Timestamp
    if not ns and type(v).__name__ == "datetime64":  # numpy.datetime64
        import numpy as np

        ns = int(v.astype("datetime64[ns]").astype(np.int64)) % 1000
    if ns:
        raise SchemaError(f"column {name!r}, row {row}: timestamp {v} has sub-microsecond digits; timestamps are "
                          "stored in microseconds and are not truncated silently (round them where they are made)")
    if type(v).__name__ == "datetime64":
        raise SchemaError(f"column {name!r}, row {row}: numpy.datetime64 {v} has no time zone; pass a "
                          "timezone-aware datetime")


def empty(schema: pa.Schema) -> pa.Table:
    """An empty table of ``schema``."""
    return schema.empty_table()
