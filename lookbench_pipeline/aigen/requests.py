"""Generation requests of the AI-generated subsets: which real items are generated (ranked per subset, balanced
over categories), the prompt built from their labels, the seed, and the request id that hashes all of these
(:func:`make_requests`; the package docstring of :mod:`lookbench_pipeline.aigen` has the flow). The bottom module
of the package: it imports no sibling."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from ..config import AigenConfig
from ..taxonomy import Taxonomy

PROMPT_VERSION = "aigen-prompt/1"
KIND_OF_SUBSET = {"aigen_studio": "studio", "aigen_streetlook": "street"}


def describe_item(category: str, attrs: dict[str, str], taxonomy: Taxonomy) -> str:
    """A noun phrase for an item from its labels, e.g. ``"a red striped cotton top (sleeve length: short)"``.

    Colour, pattern and material go before the category noun (a solid pattern as "solid black"); every other
    attribute the category uses follows as ``name: value``; values "not visible" are left out."""
    nv = taxonomy.not_visible
    val = {a: v for a, v in attrs.items() if v and v != nv}
    used = taxonomy.categories[category].attributes if category in taxonomy.categories else tuple(sorted(val))
    front = [val[a] for a in ("color", "pattern", "material") if a in val]
    if val.get("pattern") == "solid":
        front.remove("solid")
        front.insert(0, "solid")
    rest = [f"{a.replace('_', ' ')}: {val[a]}" for a in used if a not in ("color", "pattern", "material") and a in val]
    return f"a {' '.join([*front, category.replace('_', ' ')])}" + (f" ({'; '.join(rest)})" if rest else "")


def build_prompt(kind: str, category: str, attrs: dict[str, str], taxonomy: Taxonomy) -> str:
    """The generation prompt of one request (version :data:`PROMPT_VERSION`)."""
    item = describe_item(category, attrs, taxonomy)
    keep = ("The garment must be exactly the one in the reference image: the same colour, pattern, shape and "
            "details.")
    if kind == "studio":
        return (f"Lifestyle studio photograph of {item}, the only product in the picture, fully visible, on a "
                f"plain studio backdrop with soft light; photorealistic. {keep}")
    if kind == "street":
        return (f"Street-style photograph of a person in a city street wearing an outfit that includes {item} "
                f"together with other clothes of different colours; full body, natural daylight; photorealistic. "
                f"{keep}")
    raise ValueError(f"unknown kind {kind!r}; expected studio or street")


@dataclass(frozen=True)
class Reference:
    """A real item that may be generated: its labels and the gallery image that is sent as the reference."""

    item_id: str
    image_sha256: str
    site: str
    category: str
    attributes: dict[str, str]
    first_seen_at: datetime


def reference_candidates(products: pa.Table, drop_items: pa.Table, image_refs: pa.Table, annotations: pa.Table,
                         window: Any | None = None) -> tuple[list[Reference], dict[str, int]]:
    """Items that can be generated, and ``counts``: ``items = eligible + not_labelled + no_accepted_image +
    outside_window``. ``window`` (a :class:`~lookbench_pipeline.windows.Window`) keeps items first seen inside it."""
    ann = {r["item_id"]: r for r in annotations.to_pylist() if r["status"] == "labelled"}
    accepted: dict[tuple[str, str], list[dict]] = {}
    for r in image_refs.to_pylist():
        if r["status"] == "accepted":
            accepted.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
    items: list[tuple[str, str, str | None, datetime]] = []  # item id, site, gallery sha256, first seen
    for p in products.to_pylist():
        refs = sorted(accepted.get(("product", p["product_id"]), []), key=lambda r: r["position"])
        items.append((p["product_id"], p["site"], refs[0]["image_sha256"] if refs else None, p["first_seen_at"]))
    for d in drop_items.to_pylist():
        if d["role"] == "gallery":
            refs = accepted.get(("drop", d["drop_image_id"]), [])
            items.append((d["item_id"], f"drop:{d['drop']}", refs[0]["image_sha256"] if refs else None,
                          d["first_seen_at"]))
    counts = {"items": 0, "eligible": 0, "not_labelled": 0, "no_accepted_image": 0, "outside_window": 0}
    out: dict[str, Reference] = {}
    for item_id, site, sha, seen in sorted(items, key=lambda t: (t[0], t[2] or "")):
        if item_id in out:
            continue  # a second gallery picture of an item already taken
        counts["items"] += 1
        a = ann.get(item_id)
        if a is None:
            counts["not_labelled"] += 1
        elif sha is None:
            counts["no_accepted_image"] += 1
        elif window is not None and seen not in window:
            counts["outside_window"] += 1
        else:
            counts["eligible"] += 1
            out[item_id] = Reference(item_id, sha, site, a["category"],
                                     {x["name"]: x["value"] for x in a["attributes"]}, seen)
    return list(out.values()), counts


def _rank(seed: int, subset: str, item_id: str) -> str:
    return hashlib.sha1(f"{seed}\x00{subset}\x00{item_id}".encode()).hexdigest()


def request_seed(seed: int, subset: str, item_id: str) -> int:
    """The generator seed of one request: 31 bits of ``sha1(seed, subset, item)`` (fits every server's int)."""
    return int(_rank(seed, subset, item_id)[:8], 16) & 0x7FFFFFFF


def make_requests(cfg: AigenConfig, references: Sequence[Reference], taxonomy: Taxonomy,
                  size: str) -> tuple[list[dict], dict[str, Any]]:
    """Pick items per configured subset and build their requests (rows of ``generation_requests``)."""
    rows, counts = [], {"eligible": len(references)}
    pool = [r for r in references if not cfg.categories or r.category in cfg.categories]
    counts["category_not_selected"] = len(references) - len(pool)
    for subset in cfg.subsets:
        kind = KIND_OF_SUBSET[subset]
        by_cat: dict[str, list[Reference]] = {}
        for r in sorted(pool, key=lambda r: _rank(cfg.seed, subset, r.item_id)):
            by_cat.setdefault(r.category, []).append(r)
        picked: list[Reference] = []
        while len(picked) < cfg.items_per_subset and any(by_cat.values()):
            for cat in sorted(by_cat):
                if by_cat[cat] and len(picked) < cfg.items_per_subset:
                    picked.append(by_cat[cat].pop(0))
        for r in sorted(picked, key=lambda r: r.item_id):
            seed = request_seed(cfg.seed, subset, r.item_id)
            prompt = build_prompt(kind, r.category, r.attributes, taxonomy)
            rid = hashlib.sha1("\x00".join([kind, r.item_id, r.image_sha256, str(seed), PROMPT_VERSION, prompt,
                                            size]).encode()).hexdigest()[:24]
            rows.append({"request_id": rid, "kind": kind, "subset": subset, "reference_item_id": r.item_id,
                         "reference_image_sha256": r.image_sha256, "reference_site": r.site, "category": r.category,
                         "attributes": [{"name": k, "value": v} for k, v in sorted(r.attributes.items())],
                         "prompt": prompt, "prompt_version": PROMPT_VERSION, "seed": seed, "size": size})
        counts[f"requests.{subset}"] = len(picked)
    counts["requests"] = len(rows)
    return rows, counts
