"""Reading other data sets' annotation files (VITON-HD, Fashionpedia, DeepFashion2, ModaNet) into mapped entries
(:class:`Garment`, :class:`AnnotationFile`; :func:`read_annotation_file`). Formats and unmapped reasons: the
package docstring of :mod:`lookbench_pipeline.label_import`."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..coco import annotation_box as _coco_box
from ..coco import coco_index, fit_box as _fit, image_size as _size, is_id as _is_id, named_list
from ..coco import number as _number
from ..config import ConfigError
from ..memo import file_stamp
from .mapper import KINDS, LabelMapper, _given, _norm, annotator_of

if TYPE_CHECKING:
    from ..config import AnnotationFileConfig

PART_SUPERCATEGORIES = ("garment parts", "closures", "decorations")
"""Fashionpedia supercategories whose objects are parts of a garment, not garments."""


@dataclass
class Garment:
    """One entry of an annotation file (a garment, or a Fashionpedia garment part).

    ``reason`` is None when the entry maps (a garment to a category, a part to a garment, ``attached_to``); else
    why not. ``box``: ``[x1, y1, x2, y2]`` pixels on the annotated image of ``size`` ``(width, height)``, clipped
    to it when the size is known (a box wholly outside it: no box, ``reason`` ``box_outside_image``)."""

    entry: str
    file_name: str | None
    image_id: Any
    source_category: str
    category: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    unmapped: list[dict] = field(default_factory=list)
    box: list[float] | None = None
    size: tuple[int, int] | None = None
    part: bool = False
    attached_to: str | None = None
    reason: str | None = None
    source_ids: list[tuple[str, int | None]] = field(default_factory=list, repr=False)  # Fashionpedia attributes

    @property
    def area(self) -> float:
        return (self.box[2] - self.box[0]) * (self.box[3] - self.box[1]) if self.box else 0.0

    def struct(self) -> dict[str, Any]:
        """The ``garments`` column's struct."""
        return {"entry": self.entry, "source_category": self.source_category, "category": self.category,
                "attributes": [{"name": k, "value": v} for k, v in sorted(self.attributes.items())],
                "box": self.box, "image_width": self.size[0] if self.size else None,
                "image_height": self.size[1] if self.size else None}


@dataclass
class AnnotationFile:
    """The entries of one annotation file, mapped (:func:`read_annotation_file`)."""

    kind: str
    path: Path
    garments: list[Garment]

    @property
    def annotator(self) -> str:
        return annotator_of(self.kind)

    def counts(self) -> dict[str, Any]:
        """``entries = mapped + unmapped`` with ``unmapped.<reason>`` and ``category.<ours>``."""
        c: Counter = Counter(entries=len(self.garments))
        for g in self.garments:
            if g.reason is None:
                c["mapped"] += 1
                if g.category:
                    c[f"category.{g.category}"] += 1
            else:
                c["unmapped"] += 1
                c[f"unmapped.{g.reason}"] += 1
        out = {"mapped": 0, "unmapped": 0, **dict(sorted(c.items()))}
        assert out["entries"] == out["mapped"] + out["unmapped"]
        return out


_JSON_CACHE: dict[tuple[str, str], Any] = {}


def _load_json(path: Path) -> Any:
    """A JSON file (cached by path and :func:`memo.file_stamp`: one file serves several sources).

    Raises ConfigError."""
    try:
        st = path.stat()
        key = (str(path.resolve()), file_stamp(st))
        if key not in _JSON_CACHE:
            _JSON_CACHE.clear()
            # utf-8-sig: a byte-order mark (some editors write one) is not part of the JSON, as in an item sheet
            _JSON_CACHE[key] = json.loads(path.read_bytes().decode("utf-8-sig"))
        return _JSON_CACHE[key]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the annotation file ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc


def _outside(g: Garment, value: str) -> None:
    """``g``'s box lies outside its image: the entry is unmapped ``box_outside_image`` (a box that misses its
    image says the entry does not describe it), recorded in its ``unmapped`` as ``bbox``: ``value``."""
    g.reason = g.reason or "box_outside_image"
    g.unmapped.append({"name": "bbox", "value": value, "reason": "box_outside_image"})


def _coco(path: Path, data: Any, what: str) -> tuple[dict[Any, dict], list[dict]]:
    """``(images by id, annotations)`` of a COCO-style file (:func:`lookbench_pipeline.coco.coco_index`). Raises
    ConfigError naming the file and entry."""
    return coco_index(path, data, what, ConfigError)


def _named_list(path: Path, data: Any, key: str) -> dict[Any, dict]:
    return named_list(path, data, key, ConfigError)


def _box_text(box: list[float], size: tuple[int, int] | None) -> str:
    return "[" + ", ".join(f"{v:g}" for v in box) + "]" + (f" on {size[0]}x{size[1]}" if size else "")


def read_vitonhd(path: Path, mapper: LabelMapper, view: str = "cloth") -> AnnotationFile:
    """VITON-HD tags. ``view``: whose box to keep, the garment photo's (``cloth``) or the person photo's
    (``image``). Raises ConfigError (not ``{"data": [...]}``, an entry without ``file_name``, a malformed
    ``tag_info``, a file name twice)."""
    data = _load_json(path)
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: not VITON-HD tags (an object with a 'data' list)")
    spec = mapper.spec["vitonhd"]
    aliases = spec.get("values") or {}
    seen: dict[str, int] = {}
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("file_name"), str) or not e["file_name"].strip():
            raise ConfigError(f"{path}: data[{i}] has no 'file_name'")
        fname = e["file_name"].strip()
        if fname in seen:
            raise ConfigError(f"{path}: data[{i}] and data[{seen[fname]}] both describe {fname!r}")
        seen[fname] = i
        tags = e.get("tag_info", [])
        if not isinstance(tags, list) or not all(isinstance(t, dict) and isinstance(t.get("tag_name"), str)
                                                 for t in tags):
            raise ConfigError(f"{path}: data[{i}] ({fname}): 'tag_info' must be a list of {{tag_name, tag_category}}")
        values = [(t["tag_name"], str(t.get("tag_category")).strip()) for t in tags if _given(t.get("tag_category"))]
        item = next((v for n, v in values if n == "item"), None)
        cat_name = e.get("category_name")
        g = Garment(entry=f"{path.name}#{fname}", file_name=fname, image_id=Path(fname).stem,
                    source_category=item or str(cat_name))
        fallback = spec["category_names"].get(str(cat_name)) if cat_name is not None else None
        if item is not None:
            phrase = (aliases.get("item") or {}).get(item, item)
            g.category = mapper.category(phrase)
            if g.category is not None:
                a, v, _ = mapper.value(g.category, ["style"], phrase)
                if a:
                    g.attributes[a] = v
            elif fallback is not None:  # the item names a feature of its category_name's garments ("Turtleneck")
                a, v, _ = mapper.value(fallback, list(mapper.tax.categories[fallback].attributes), phrase)
                if a:
                    g.category, g.attributes[a] = fallback, v
        else:
            g.category = fallback
        if g.category is None:
            g.reason = "unknown_category"
            g.unmapped.append({"name": "item" if item else "category_name", "value": item or str(cat_name),
                               "reason": "unknown_category"})
        else:
            for name, raw in values:
                if name == "item":
                    continue
                if name not in spec["tags"]:
                    g.unmapped.append({"name": name, "value": raw, "reason": "unknown_tag"})
                    continue
                if not spec["tags"][name]:
                    g.unmapped.append({"name": name, "value": raw, "reason": "not_in_taxonomy"})
                    continue
                a, v, why = mapper.value(g.category, spec["tags"][name], (aliases.get(name) or {}).get(raw, raw))
                if a is None:
                    g.unmapped.append({"name": name, "value": raw, "reason": why})
                elif g.attributes.setdefault(a, v) != v:
                    g.unmapped.append({"name": name, "value": raw, "reason": "conflicting_values"})
        g.box, g.size, outside = _vitonhd_box(e.get("image"), view)
        if outside:
            _outside(g, view)
        elif e.get("image") is not None and g.box is None:
            g.unmapped.append({"name": "bbox", "value": view, "reason": "no_box"})
        out.append(g)
    return AnnotationFile("vitonhd", path, out)


def _vitonhd_box(images: Any, view: str) -> tuple[list[float] | None, tuple[int, int] | None, bool]:
    """``(box, size, outside)`` of the ``view`` image: its ``bbox`` is fractions of ``image_width`` ×
    ``image_height``, the box pixels, clipped to the image (:func:`_fit`)."""
    for im in images if isinstance(images, list) else []:
        if not isinstance(im, dict) or im.get("image_path") != view:
            continue
        size = _size({"width": im.get("image_width"), "height": im.get("image_height")})
        b = im.get("bbox")
        keys = ("left", "top", "width", "height")
        if size is None or not isinstance(b, dict) or not all(
                isinstance(b.get(k), (int, float)) and not isinstance(b.get(k), bool) and math.isfinite(b[k])
                for k in keys):
            return None, size, False
        w, h = size
        x1, y1 = b["left"] * w, b["top"] * h
        box, outside = _fit([x1, y1, x1 + b["width"] * w, y1 + b["height"] * h], size)
        return ([round(v, 2) for v in box] if box else None), size, outside
    return None, None, False


def read_fashionpedia(path: Path, mapper: LabelMapper, ontology: Path) -> AnnotationFile:
    """A COCO-style Fashionpedia file. ``ontology``: ``category_attributes_descriptions.json``, whose attribute ids
    the taxonomy maps: a file that lists its own attributes (the sample numbers 320 of them otherwise) is joined
    to it by attribute name, one that does not is taken to use its ids. Raises ConfigError (not COCO-style, a
    category or attribute list without ids and names, ``attribute_ids`` not a list of ids)."""
    data = _load_json(path)
    images, anns = _coco(path, data, "Fashionpedia")
    cats = _named_list(path, data, "categories")
    own_attrs = _named_list(path, data, "attributes") if isinstance(data.get("attributes"), list) else {}
    onto = _load_json(ontology)
    _named_list(ontology, onto, "categories")
    canon = {c["name"]: i for i, c in _named_list(ontology, onto, "attributes").items()}
    canon_ids = set(canon.values())

    def ontology_id(i: int) -> tuple[str, int | None]:
        if own_attrs:
            name = own_attrs[i]["name"] if i in own_attrs else None
            return name or str(i), canon.get(name) if name else None
        return str(i), i if i in canon_ids else None

    garments: list[Garment] = []
    for j, a in enumerate(anns):
        aid = a.get("id", j)
        im = images.get(_number(a["image_id"]))
        cat = cats.get(_number(a["category_id"]))
        g = Garment(entry=f"{path.name}#{aid}", file_name=im.get("file_name") if im else None,
                    image_id=_number(a["image_id"]), source_category=cat["name"] if cat else str(a["category_id"]),
                    box=_coco_box(a), size=_size(im) if im else None)
        raw = g.box
        g.box, outside = _fit(raw, g.size)
        ids = _number(a.get("attribute_ids") or [])
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ConfigError(f"{path}: annotation {aid}: 'attribute_ids' must be a list of integer ids")
        g.source_ids = [ontology_id(i) for i in ids]
        if im is None:
            g.reason = "unknown_image"
        elif cat is None:
            g.reason = "unknown_category"
            g.unmapped.append({"name": "category", "value": g.source_category, "reason": "unknown_category"})
        elif cat.get("supercategory") in PART_SUPERCATEGORIES:
            g.part = True
            if outside:  # recorded as the part's reason (photo_label: name "part")
                g.reason = "box_outside_image"
        elif outside:
            _outside(g, _box_text(raw, g.size))
        else:
            g.category = mapper.fashionpedia_category(cat["name"])
            if g.category is None:
                g.reason = "not_in_taxonomy"
                g.unmapped.append({"name": "category", "value": cat["name"], "reason": "not_in_taxonomy"})
            else:
                g.attributes, g.unmapped = mapper.fashionpedia_attributes(g.category, g.source_ids)
                for k, v in mapper.fashionpedia_named(g.category, cat["name"], whole=True).items():
                    g.attributes.setdefault(k, v)
        garments.append(g)
    _attach_parts(garments, mapper)
    return AnnotationFile("fashionpedia", path, garments)


def _attach_parts(garments: list[Garment], mapper: LabelMapper) -> None:
    """Give each Fashionpedia part's attributes to the garment of its image whose box covers most of the part's
    box (at least half; the smaller garment on a tie). A garment's own values win; a part's differing value is
    recorded ``conflicting_values`` on the garment."""
    whole: dict[Any, list[Garment]] = {}
    for g in garments:
        if not g.part and g.reason is None:
            whole.setdefault(g.image_id, []).append(g)
    for p in garments:
        if not p.part or p.reason is not None:
            continue
        best, best_key = None, (0.5, 0.0)
        for g in whole.get(p.image_id, []) if p.box else []:
            ix = max(0.0, min(p.box[2], g.box[2]) - max(p.box[0], g.box[0])) if g.box else 0.0
            iy = max(0.0, min(p.box[3], g.box[3]) - max(p.box[1], g.box[1])) if g.box else 0.0
            key = (ix * iy / p.area if p.area else 0.0, -g.area)
            if key[0] >= 0.5 and key > best_key:
                best, best_key = g, key
        if best is None:
            p.reason = "part_without_garment"
            continue
        p.attached_to = best.entry
        attrs, unmapped = mapper.fashionpedia_attributes(best.category, p.source_ids)
        attrs = {**mapper.fashionpedia_named(best.category, p.source_category, whole=False), **attrs}
        best.unmapped += [{**u, "value": f"{p.source_category}: {u['value']}"} for u in unmapped]
        for k, v in attrs.items():
            if best.attributes.setdefault(k, v) != v:
                best.unmapped.append({"name": k, "value": f"{p.source_category}: {v}", "reason": "conflicting_values"})


def _mapped_category(mapper: LabelMapper, kind: str, g: Garment, name: str | None) -> None:
    """Set ``g``'s category from ``label_sources.yaml`` ``<kind>.categories`` (a name it lacks is
    ``unknown_category``, a name mapped to null ``ambiguous_category``)."""
    table = {_norm(k): v for k, v in (mapper.spec[kind]["categories"] or {}).items()}
    key = _norm(name) if name is not None else None
    if key is None or key not in table:
        g.reason = "unknown_category"
    elif table[key] is None:
        g.reason = "ambiguous_category"
    else:
        g.category = table[key]["category"]
        g.attributes = dict(table[key].get("attributes") or {})
    if g.reason:
        g.unmapped.append({"name": "category", "value": g.source_category, "reason": g.reason})


def read_deepfashion2(path: Path, mapper: LabelMapper) -> AnnotationFile:
    """DeepFashion2 in COCO form (``deepfashion2_to_coco``). Raises ConfigError (not COCO-style, categories without
    ids and names)."""
    data = _load_json(path)
    images, anns = _coco(path, data, "DeepFashion2")
    cats = _named_list(path, data, "categories")
    out = []
    for j, a in enumerate(anns):
        im = images.get(_number(a["image_id"]))
        cat = cats.get(_number(a["category_id"]))
        g = Garment(entry=f"{path.name}#{a.get('id', j)}", file_name=im.get("file_name") if im else None,
                    image_id=_number(a["image_id"]), source_category=cat["name"] if cat else str(a["category_id"]),
                    box=_coco_box(a), size=_size(im) if im else None)
        raw = g.box
        g.box, outside = _fit(raw, g.size)
        if im is None:
            g.reason = "unknown_image"
        elif outside:
            _outside(g, _box_text(raw, g.size))
        else:
            _mapped_category(mapper, "deepfashion2", g, cat["name"] if cat else None)
        out.append(g)
    return AnnotationFile("deepfashion2", path, out)


def read_modanet_categories(path: Path) -> dict[int, str]:
    """``categories.tsv`` (``id<TAB>name`` with a header line): id -> name. Raises ConfigError."""
    try:
        rows = list(csv.reader(path.read_text(encoding="utf-8-sig").splitlines(), delimiter="\t"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the ModaNet categories ({exc})") from exc
    out = {}
    for n, r in enumerate(rows, 1):
        if not r or (n == 1 and not r[0].strip().isdigit()):
            continue
        if len(r) < 2 or not r[0].strip().isdigit() or not r[1].strip():
            raise ConfigError(f"{path}:{n}: expected 'id<TAB>name', got {r!r}")
        out[int(r[0])] = r[1].strip()
    if not out:
        raise ConfigError(f"{path}: no categories")
    return out


def read_modanet(path: Path, mapper: LabelMapper, categories: Path) -> AnnotationFile:
    """ModaNet: a snaps file (``[{image_id, snap_url?, items: [{category_id, bbox, ...}]}]``) or a COCO-style
    release, categories by id from ``categories`` (``categories.tsv``; file ids = tsv ids +
    ``modanet.category_id_offset``). Raises ConfigError."""
    names = read_modanet_categories(categories)
    offset = int(mapper.spec["modanet"].get("category_id_offset", 0))
    data = _load_json(path)
    # (entry, image id, file name, item, annotated size, whether the image is known)
    rows: list[tuple[str, Any, str | None, dict, tuple[int, int] | None, bool]] = []
    if isinstance(data, list):
        for i, snap in enumerate(data):
            if not isinstance(snap, dict) or not _is_id(_number(snap.get("image_id"))) \
                    or not isinstance(snap.get("items"), list):
                raise ConfigError(f"{path}: [{i}] is not a ModaNet snap ({{image_id, items: [...]}}; the id a number "
                                  "or a string)")
            fname = Path(str(snap["snap_url"])).name if snap.get("snap_url") else None
            for k, it in enumerate(snap["items"]):
                if not isinstance(it, dict) or "category_id" not in it:
                    raise ConfigError(f"{path}: image {snap['image_id']} item {k} has no 'category_id'")
                if not _is_id(_number(it["category_id"])):
                    raise ConfigError(f"{path}: image {snap['image_id']} item {k}: 'category_id' must be a number or "
                                      f"a string, not {it['category_id']!r:.80}")
                rows.append((f"{snap['image_id']}.{k}", _number(snap["image_id"]), fname, it, None, True))
    else:
        images, anns = _coco(path, data, "ModaNet")
        for j, a in enumerate(anns):
            im = images.get(_number(a["image_id"]))
            rows.append((str(a.get("id", j)), _number(a["image_id"]), im.get("file_name") if im else None, a,
                         _size(im) if im else None, im is not None))
    out = []
    for entry, iid, fname, it, size, known in rows:
        cid = _number(it["category_id"])
        name = names.get(cid - offset) if isinstance(cid, int) and not isinstance(cid, bool) else None
        raw = _coco_box(it)
        box, outside = _fit(raw, size)
        g = Garment(entry=f"{path.name}#{entry}", file_name=fname, image_id=iid, source_category=name or str(cid),
                    box=box, size=size)
        if not known:
            g.reason = "unknown_image"
        elif outside:
            _outside(g, _box_text(raw, size))
        else:
            _mapped_category(mapper, "modanet", g, name)
        out.append(g)
    return AnnotationFile("modanet", path, out)


def read_annotation_file(src: "AnnotationFileConfig", mapper: LabelMapper) -> AnnotationFile:
    """Read and map one configured annotation file. Raises ConfigError naming the file and the entry."""
    path = Path(src.path)
    if src.kind == "vitonhd":
        return read_vitonhd(path, mapper, src.view)
    if src.kind == "fashionpedia":
        if src.categories is None:
            raise ConfigError(f"{path}: a fashionpedia file needs 'categories' (its category_attributes_descriptions"
                              ".json)")
        return read_fashionpedia(path, mapper, Path(src.categories))
    if src.kind == "deepfashion2":
        return read_deepfashion2(path, mapper)
    if src.kind == "modanet":
        if src.categories is None:
            raise ConfigError(f"{path}: a modanet file needs 'categories' (ModaNet's categories.tsv)")
        return read_modanet(path, mapper, Path(src.categories))
    raise ConfigError(f"{path}: unknown annotation kind {src.kind!r} (one of {', '.join(KINDS)})")
