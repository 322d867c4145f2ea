"""The data contracts: one explicit pyarrow schema per table, and the only place they are defined.

(Over 500 lines on purpose: the tables' schemas, their column comments and ``TABLES``, keyed by table name, are
the one contract every stage reads, and the Dagster layer's ``assets/tables.py`` binds each table asset to one of
them; split, a reader would have to know which file holds which table.)

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
* negatives -> ``negatives``: soft-negative distractors mined from Fashion200K per query item (the release's
  ``noise`` gallery is made of them).
* aigen -> ``generation_requests`` (what to generate for which real item), ``generated_images`` (one row per
  request: the generated file and its provenance, or why there is none) and ``generated_checks`` (one row per
  generated image: intake, dedup, contamination and the reference check, accepted or rejected with the reason).
* detect -> ``detections``: every box the garment detector gave on a street-look image (kept with its crop and
  matched product, or dropped with a reason).
* release -> ``query`` / ``gallery``: the published LookBench files (see :data:`RELEASE`).
* release -> ``changes.parquet``: what changed since the previous release (see :data:`RELEASE_CHANGES`).
* evaluate -> ``scores``: one row per (model, subset, metric).
* evaluate -> ``leaderboard``: one row per (model, subset), one column per metric (:func:`leaderboard_schema`).
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
        ("product_id", pa.string()),  # stable id: sha1 of site + variant_id (or URL path), independent of host/port
        ("site", pa.string()),
        ("url", pa.string()),
        ("title", pa.string()),
        ("description", pa.string()),
        ("brand", pa.string()),
        ("sku", pa.string()),  # the shop's reference as the page states it ("Ref. 1002/710"); may be the model's
        ("variant_id", pa.string()),  # the item's own id at colour granularity: what product_id is made of
        ("price", pa.float64()),
        ("currency", pa.string()),  # ISO 4217 where known, else the symbol as printed
        ("color", pa.string()),
        ("material", pa.string()),
        ("category_text", pa.string()),  # the shop's own category / breadcrumb text
        ("image_urls", pa.list_(pa.string())),
        ("extracted_from", pa.string()),  # json-ld | microdata | rdfa | state-json | opengraph | rules | visible
        ("availability", pa.string()),  # schema.org ItemAvailability short name: InStock, OutOfStock, PreOrder…
        ("group_id", pa.string()),  # the product group (model) of a colour variant: same model, other colour
        ("field_sources", pa.list_(ATTRIBUTE)),  # [{name: field, value: source it was extracted from}]
        ("facets", pa.list_(ATTRIBUTE)),  # the shop's own attribute facets: schema.org additionalProperty name/value
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
        ("category_text", pa.string()),  # the items sheet's `category` column
        ("facets", pa.list_(ATTRIBUTE)),  # the items sheet's `attributes` column, [{name, value}] as written
        ("first_seen_at", TS),
    ]
)

CRAWL_LOG = pa.schema(
    [
        ("site", pa.string()),
        ("url", pa.string()),
        ("status", pa.int32()),  # HTTP status, 0 when no response
        ("outcome", pa.string()),  # product | look | listing | sitemap | redirected | rejected | subresource_refused
        ("reason", pa.string()),  # why rejected (no_structured_data, http_404, robots_disallowed...)
        # where a redirect led: a `redirected` row's target (an absolute URL, which has its own row), or a refused
        # redirect's (reason redirect:host_not_allowed, redirect:loop, redirect:too_many...; for redirect:malformed
        # the Location header as read, latin-1; a refused one longer than 200 characters is cut, with its sha256 and
        # length: extract.images.refused_form); null for every other row, and in a partition stored before the
        # column existed (schemas.upgrade)
        ("redirect_to", pa.string()),
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
        ("detail", pa.string()),  # the rejection in words ("65000x1000 > 64000000 pixels", "ICO (...)"), or null
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
        ("fg_signature", pa.string()),  # foreground colour per cell of an 8x8 grid, 520 hex (lookbench_pipeline.foreground)
        ("block_codes", pa.string()),  # 16x16 16-bit block codes + inside-subject mask, 1088 hex: finds a cut-out of a photo (foreground)
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
        ("fg_signature", pa.string()),  # as in IMAGES; null in rows indexed before it existed (re-indexed)
        ("block_codes", pa.string()),
        ("flags", pa.list_(pa.string())),
        ("stamp", pa.string()),  # memo.file_stamp of the file when indexed (incremental re-indexing)
        # the signatures of the left-right mirror image (a flipped copy is a leak); null in rows indexed before it
        # existed (re-indexed)
        ("mirrored", pa.struct([("phash", pa.string()), ("color_signature", pa.string()),
                                ("fg_signature", pa.string())])),
    ]
)

CONTAMINATION = pa.schema(
    [
        ("image_sha256", pa.string()),  # the new image
        ("source", pa.string()),
        ("matched_path", pa.string()),
        ("matched_item_id", pa.string()),
        ("hamming", pa.int32()),  # pHash bits; 0 for an exact (sha256) match
        # exact | near | mirrored (near the index image's left-right mirror) | cutout (one is a
        # background-removed cut-out of the other)
        ("kind", pa.string()),
    ]
)

VERDICT = pa.struct([("name", pa.string()), ("value", pa.string()), ("verdict", pa.string()), ("round", pa.int8())])
"""A judge's verdict on one attribute label: ``verdict`` is ``accept`` or ``reject``; ``round`` 1 for the first
label, 2 for a re-annotated one."""

UNMAPPED = pa.struct([("name", pa.string()), ("value", pa.string()), ("reason", pa.string())])
"""A source label that did not map onto the taxonomy: the source's tag (or ``category``, ``attribute``, ``part``,
a facet name), its value as the source wrote it, and why (``no_taxonomy_value``, ``not_allowed_for_category``,
``unknown_category``... ``lookbench_pipeline.label_import``)."""

CONFLICT = pa.struct([("name", pa.string()), ("value", pa.string()), ("annotator", pa.string())])
"""A value a lower-precedence source gave for ``name`` (an attribute or ``category``) that differs from the kept
one."""

GARMENT = pa.struct([("entry", pa.string()), ("source_category", pa.string()), ("category", pa.string()),
                     ("attributes", pa.list_(ATTRIBUTE)), ("box", BOX), ("image_width", pa.int32()),
                     ("image_height", pa.int32())])
"""One garment an imported annotation describes in the photo: the entry (``<file>#<id>``), its category in the
source and ours, its attributes, its box (pixels ``[x1, y1, x2, y2]`` on the image as the data set annotated it,
of ``image_width`` × ``image_height`` when the source says)."""

ANNOTATIONS = pa.schema(
    [
        ("item_id", pa.string()),  # product_id or drop item id
        ("status", pa.string()),  # labelled | rejected | failed (an image model's request failed after retries)
        ("reason", pa.string()),
        ("category", pa.string()),
        ("attributes", pa.list_(ATTRIBUTE)),  # what Fine matching reads (the judge's rejections removed)
        # name/version of what produced the labels (of the category, when merged): catalog-text/1, vlm:…,
        # import:<data set> (the data set's own annotation file), facets:schema.org / facets:items-sheet
        ("annotator", pa.string()),
        ("taxonomy_version", pa.string()),
        # Image-model provenance (null for the catalogue-text annotator): the image labelled, the model, the
        # server-reported vLLM version, the prompt version, the sampling parameters (JSON), the judge and its
        # verdicts, and how many requests this run sent for the item (0 when answered from the cache). An imported
        # label has the photo it describes and its garment's box (pixels on the image as annotated).
        ("image_sha256", pa.string()),
        ("box", BOX),
        ("model", pa.string()),
        ("server_version", pa.string()),
        ("prompt_version", pa.string()),
        ("sampling", pa.string()),
        ("judge_model", pa.string()),
        ("judge_server_version", pa.string()),
        ("judge_prompt_version", pa.string()),
        ("judge_verdicts", pa.list_(VERDICT)),
        ("requests", pa.int32()),
        # Labels merged from several sources (lookbench_pipeline.label_import; null when one source labelled it):
        # who gave the category and each attribute, the differing values of lower-precedence sources, the
        # source labels that did not map, and the garments an imported annotation describes (with their boxes).
        ("attribute_sources", pa.list_(ATTRIBUTE)),  # [{name: attribute or "category", value: annotator}]
        ("conflicts", pa.list_(CONFLICT)),
        ("unmapped", pa.list_(UNMAPPED)),
        ("garments", pa.list_(GARMENT)),
    ]
)

NEGATIVES = pa.schema(
    [
        ("query_item_id", pa.string()),  # the item (product_id or drop item id) the distractor was mined for
        ("query_category", pa.string()),
        ("distractor_sha256", pa.string()),  # of the original bytes (stored in the object store)
        ("distractor_item_id", pa.string()),  # "<source>:<item id in the source>"
        ("distractor_source", pa.string()),  # the negatives source's name
        ("distractor_path", pa.string()),  # path within the source (or "<parquet file>#<row>")
        ("distractor_category", pa.string()),  # our taxonomy, mapped from the source's labels
        ("distractor_attributes", pa.list_(ATTRIBUTE)),
        ("distractor_annotator", pa.string()),
        ("width", pa.int32()),  # pixels
        ("height", pa.int32()),
        ("similarity", pa.float32()),  # cosine similarity, the maximum over the query item's images
        ("rank", pa.int32()),  # 1 = the item's closest kept distractor
        ("same_category", pa.bool_()),
        ("shared_attributes", pa.int32()),  # attributes both carry
        ("agreeing_attributes", pa.int32()),  # of those, equal
        ("kind", pa.string()),  # soft | ambiguous | easy (docs/METRICS.md)
        ("model", pa.string()),  # the mining model: id, revision, input size (pixels), embedding size, weights
        ("model_revision", pa.string()),
        ("model_input_size", pa.int32()),
        ("model_dim", pa.int32()),
        ("model_weights_sha256", pa.string()),
    ]
)

GENERATION_REQUESTS = pa.schema(
    [
        ("request_id", pa.string()),  # sha1 of kind, reference item, reference image, seed, prompt version, prompt
        ("kind", pa.string()),  # studio (a lifestyle studio shot of the item) | street (a street outfit with it)
        ("subset", pa.string()),  # aigen_studio | aigen_streetlook
        ("reference_item_id", pa.string()),  # the real item (product_id or drop item id) the picture must show
        ("reference_image_sha256", pa.string()),  # its gallery image, sent as the reference
        ("reference_site", pa.string()),
        ("category", pa.string()),  # from the annotations table
        ("attributes", pa.list_(ATTRIBUTE)),  # the labels the prompt was built from
        ("prompt", pa.string()),
        ("prompt_version", pa.string()),
        ("seed", pa.int64()),
        ("size", pa.string()),  # WIDTHxHEIGHT in pixels, as asked
    ]
)

GENERATED_IMAGES = pa.schema(
    [
        ("request_id", pa.string()),
        ("kind", pa.string()),
        ("subset", pa.string()),
        ("reference_item_id", pa.string()),
        ("reference_image_sha256", pa.string()),
        ("status", pa.string()),  # generated | failed | pending (job file written, no result yet) | skipped
        ("reason", pa.string()),  # http_500, timeout, malformed_response, no_provenance_sidecar, window_closed ...
        ("detail", pa.string()),  # the last error message, for a person to read
        ("attempts", pa.int32()),  # requests sent for this row in this run (0: taken from an earlier run)
        ("backend", pa.string()),  # endpoint | job_file
        ("path", pa.string()),  # absolute path of the generated bytes as received; null without a result
        ("generator_model", pa.string()),
        ("generator_version", pa.string()),
        ("prompt", pa.string()),
        ("seed", pa.int64()),
        ("first_seen_at", TS),  # generation time: when the pipeline first received the image (kept forever)
    ]
)

GENERATED_CHECKS = pa.schema(
    [
        ("request_id", pa.string()),
        ("kind", pa.string()),
        ("subset", pa.string()),
        ("reference_item_id", pa.string()),
        ("reference_image_sha256", pa.string()),
        ("status", pa.string()),  # accepted | rejected
        ("reason", pa.string()),  # generation_failed:<r>, intake:<r>, duplicate_of_real_image, contamination:<src>,
        #                           category_disagreement, attribute_disagreement:<attrs>, no_attribute_to_compare,
        #                           similarity_below_threshold, annotation_failed:<r> ...
        ("image_sha256", pa.string()),
        ("cluster_id", pa.string()),  # duplicate cluster among the generated images (dedup.cluster)
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("similarity", pa.float32()),  # cosine, reference garment vs the best-matching region; null if not measured
        ("region", BOX),  # that region (the detector's box it refines, if given), pixels: x1, y1, x2, y2
        ("region_source", pa.string()),  # detector (a garment detector's box) | window_search
        ("item_index", pa.int32()),  # street outfits with detection: the item's number in the picture (DETECTIONS)
        ("crop_sha256", pa.string()),  # ... and its crop (derived/<sha[:2]>/<sha> in the store), the published query
        ("crop_width", pa.int32()),
        ("crop_height", pa.int32()),
        ("embedder", pa.string()),
        ("attributes", pa.list_(ATTRIBUTE)),  # what the annotator read from the generated image (located region)
        ("annotator", pa.string()),
        ("attributes_compared", pa.int32()),
        ("attributes_agreed", pa.int32()),
        ("source", pa.string()),  # path of the generated file
        ("backend", pa.string()),
        ("generator_model", pa.string()),
        ("generator_version", pa.string()),
        ("prompt", pa.string()),
        ("seed", pa.int64()),
        ("first_seen_at", TS),
    ]
)

GENERATION = pa.struct([("request_id", pa.string()), ("generator_model", pa.string()),
                        ("generator_version", pa.string()), ("prompt", pa.string()), ("seed", pa.int64()),
                        ("reference_image_sha256", pa.string()), ("similarity", pa.float32())])
"""Provenance of an AI-generated release image (null for real images)."""

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
        ("generation", GENERATION),  # aigen subsets: generator, prompt, seed, reference; null for real images
    ]
)

RELEASE_REQUIRED = ("sample_id", "item_ID")
"""Columns of :data:`RELEASE` that no row of a release file may leave null, although the Arrow fields are nullable
(every column of the Parquet files is): ``sample_id`` names the row (embeddings are keyed by it), ``item_ID`` is what
a query's positives are found by. ``docs/schema.json`` states them ``"nullable": false``; readers refuse a file with a
null in one (``releases.reader.check_scored_table``)."""

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
        # the model as loaded (lookbench_pipeline.embed): revision, input side (pixels), embedding size, weights
        ("model_revision", pa.string()),
        ("model_input_size", pa.int32()),
        ("model_dim", pa.int32()),
        ("model_weights_sha256", pa.string()),
    ]
)

LEADERBOARD_KEYS = pa.schema(
    [
        ("release", pa.string()),
        ("subset", pa.string()),  # a subset name, "overall", or "legacy:<benchmark>"
        ("rank", pa.int32()),  # 1 = best in the subset, by fine_recall@1 (item_recall@1 on a legacy benchmark)
        ("model", pa.string()),
        ("n_queries", pa.int64()),
        ("cutoff", pa.string()),  # ISO date, or null for no cutoff
    ]
)


def leaderboard_schema(metrics: Iterable[str]) -> pa.Schema:
    """The leaderboard table: :data:`LEADERBOARD_KEYS` then one float64 column per metric (``coarse_recall@1``
    ...; values in [0, 1], null where a metric does not apply, e.g. Fine Recall on a legacy benchmark)."""
    return pa.schema([*LEADERBOARD_KEYS, *((m, pa.float64()) for m in metrics)])


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
    "negatives": NEGATIVES,
    "generation_requests": GENERATION_REQUESTS,
    "generated_images": GENERATED_IMAGES,
    "generated_checks": GENERATED_CHECKS,
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


def upgrade(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A stored table written before columns were added to ``schema`` (e.g. a weekly crawl partition of an earlier
    version: ``products`` without ``variant_id``, ``images`` without ``fg_signature``), with each missing column of
    ``schema`` added as nulls of its type and the schema's columns in its order (any other after them), so old and
    new partitions concatenate and readers find every column; a table with all of them is returned unchanged (the
    same object, whatever its column order). Consumers treat the
    nulls as "not recorded" (e.g. dedup skips the foreground check for an image without ``fg_signature``)."""
    missing = [f for f in schema if f.name not in table.column_names]
    if not missing:
        return table
    for f in missing:
        table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    # the schema's columns in its order (then any the schema does not name), so an upgraded partition concatenates
    # with one of the current shape
    return table.select([*schema.names, *(c for c in table.column_names if c not in schema.names)])


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
