"""The precedence that merges every source of an item's labels into one ``ANNOTATIONS`` row (:func:`resolve`,
:func:`apply`; the order is in the package docstring of :mod:`lookbench_pipeline.label_import`), with a shop's
facets as a label source (:func:`facet_candidate`) and every item's candidates gathered (:func:`candidates`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .mapper import LabelMapper, rank
from .photos import import_drop

if TYPE_CHECKING:
    import pyarrow as pa

    from ..config import DropConfig

FACETS_SCHEMA_ORG = "facets:schema.org"
FACETS_ITEMS_SHEET = "facets:items-sheet"


@dataclass
class Candidate:
    """One source's label of an item: an ``ANNOTATIONS`` row, and for a shop's facets the raw ``(name, value)``
    pairs, mapped once the item's category is decided."""

    row: dict[str, Any]
    facets: list[tuple[str, str]] = field(default_factory=list)

    @property
    def annotator(self) -> str:
        return self.row["annotator"]

    @property
    def labelled(self) -> bool:
        return self.row["status"] == "labelled" and bool(self.row.get("category"))


def facet_candidate(mapper: LabelMapper, item_id: str, facets: Iterable[dict | tuple] | None, annotator: str,
                    category_text: str | None = None) -> Candidate | None:
    """A shop's facets (``[{name, value}]``) and an explicit category text as a label candidate; None without
    either. Its category is the one a category facet (or ``category_text``) names; without one it still fills
    attributes of the category another source decides."""
    pairs = [(str(f["name"]), str(f["value"])) if isinstance(f, dict) else (str(f[0]), str(f[1]))
             for f in facets or [] if (f["value"] if isinstance(f, dict) else f[1]) is not None]
    if not pairs and not (category_text and category_text.strip()):
        return None
    category = mapper.facet_category(pairs, category_text)
    unmapped = []
    if category is None and category_text and category_text.strip():
        unmapped.append({"name": "category", "value": category_text, "reason": "unknown_category"})
    row = {"item_id": item_id, "status": "labelled" if category else "rejected",
           "reason": None if category else f"{annotator}:no_category", "category": category, "attributes": [],
           "annotator": annotator, "taxonomy_version": mapper.tax.version, "unmapped": unmapped}
    return Candidate(row, pairs)


def resolve(cands: Sequence[Candidate], mapper: LabelMapper) -> dict[str, Any]:
    """Merge an item's candidate labels by precedence (module docstring) into one ``ANNOTATIONS`` row.

    The row is the category-giving candidate's (its provenance columns kept), with ``attributes`` merged,
    ``attribute_sources`` (``category`` and each attribute -> the annotator whose value was kept), ``conflicts``
    (every differing value or category a later source gave, with its annotator) and ``unmapped`` (every
    candidate's). Without a labelled candidate: the first candidate's row (its status and reason)."""
    cands = sorted(cands, key=lambda c: rank(c.annotator))  # stable: the caller's order within a rank
    unmapped = [u for c in cands for u in (c.row.get("unmapped") or [])]
    labelled = [c for c in cands if c.labelled]
    if not labelled:  # facets without a category only fill a category another source gives: not the reason
        base = next((c for c in cands if not (c.facets and not c.row.get("category"))), cands[0])
        return {**base.row, "unmapped": unmapped}
    top = labelled[0]
    category = top.row["category"]
    allowed = mapper.tax.categories[category].allowed
    image_model = any(rank(c.annotator) == 2 for c in labelled)
    attrs: dict[str, str] = {}
    sources: dict[str, str] = {"category": top.annotator}
    conflicts: list[dict] = []
    for c in cands:
        if c.row["status"] != "labelled" and not c.facets:
            continue
        if rank(c.annotator) == 3 and image_model:
            continue  # the catalogue text is the image model's baseline, not a filler of its label
        if c.row.get("category") and c.row["category"] != category:
            conflicts.append({"name": "category", "value": c.row["category"], "annotator": c.annotator})
            continue
        vals = {a["name"]: a["value"] for a in c.row.get("attributes") or []}
        if c.facets:
            fvals, funmapped = mapper.facets(category, c.facets)
            unmapped += funmapped
            vals = {**fvals, **vals}
        for a, v in sorted(vals.items()):
            if v not in allowed.get(a, ()):
                continue
            if a not in attrs:
                attrs[a], sources[a] = v, c.annotator
            elif attrs[a] != v:
                conflicts.append({"name": a, "value": v, "annotator": c.annotator})
    return {**top.row, "attributes": [{"name": k, "value": v} for k, v in sorted(attrs.items())],
            "attribute_sources": [{"name": k, "value": v} for k, v in sorted(sources.items())],
            "conflicts": conflicts, "unmapped": unmapped}


def candidates(drops: Sequence["DropConfig"], mapper: LabelMapper, products: "pa.Table", drop_items: "pa.Table",
               image_refs: "pa.Table | None" = None) -> tuple[dict[str, list[Candidate]], dict[str, Any]]:
    """Every item's label candidates besides the catalogue text and the image model: imported labels of its drop
    photos (the gallery photos first, then by path), the items sheet's ``category`` / ``attributes`` columns, a
    crawled product's ``additionalProperty`` facets. Returns ``(by item id, counts)``; counts per annotation
    source (:func:`import_drop`). Raises ConfigError (an annotation file)."""
    imports = {d.name: import_drop(d, mapper) for d in drops if d.annotations}
    sha: dict[str, str] = {}
    for r in image_refs.to_pylist() if image_refs is not None else []:
        if r["status"] == "accepted" and r["owner_type"] == "drop":
            sha.setdefault(r["owner_id"], r["image_sha256"])
    out: dict[str, list[Candidate]] = {}
    for d in sorted(drop_items.to_pylist(), key=lambda d: (d["role"] != "gallery", d["path"])):
        imp = imports.get(d["drop"])
        for row in imp.photos.get(d["path"], []) if imp else []:
            out.setdefault(d["item_id"], []).append(Candidate({**row, "item_id": d["item_id"],
                                                               "image_sha256": sha.get(d["drop_image_id"])}))
        fc = facet_candidate(mapper, d["item_id"], d.get("facets"), FACETS_ITEMS_SHEET, d.get("category_text"))
        if fc is not None:
            out.setdefault(d["item_id"], []).append(fc)
    for p in products.to_pylist():
        fc = facet_candidate(mapper, p["product_id"], p.get("facets"), FACETS_SCHEMA_ORG)
        if fc is not None:
            out.setdefault(p["product_id"], []).append(fc)
    counts = {name: c for imp in imports.values() for name, c in imp.counts.items()}
    return out, counts


def apply(rows: list[dict[str, Any]], extra: dict[str, list[Candidate]], mapper: LabelMapper
          ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``rows`` (one per item, from the catalogue text or the image model) merged with each item's ``extra``
    candidates by :func:`resolve`; rows of items without any are unchanged. Counts: ``merged`` items,
    ``labelled_by.<annotator>`` (whose category each labelled item has), ``conflicts.<name>``,
    ``unmapped_values``."""
    out = []
    c: Counter = Counter()
    for r in rows:
        more = extra.get(r["item_id"])
        if more:
            r = resolve([Candidate(r), *more], mapper)
            c["merged"] += 1
            for x in r.get("conflicts") or []:
                c[f"conflicts.{x['name']}"] += 1
            c["unmapped_values"] += len(r.get("unmapped") or [])
        if r["status"] == "labelled":
            c[f"labelled_by.{r['annotator']}"] += 1
        out.append(r)
    return out, {"merged": 0, **dict(sorted(c.items()))}
