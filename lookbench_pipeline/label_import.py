"""Labels from other data sets' own annotation files and from a shop's own attribute facets, on our taxonomy; and
the precedence that merges every source of an item's labels into one row of ``schemas.ANNOTATIONS``.

Annotation files (a drop's ``annotations:``, :class:`~lookbench_pipeline.config.AnnotationFileConfig`):

* ``vitonhd``: VITON-HD garment tags as IDM-VTON publishes them (``vitonhd_test_tagged.json``: per ``file_name`` a
  ``category_name`` and ``tag_info`` — item, colors, prints, textures, sleeveLength, neckLine, fit, length,
  details, shape, looks — and the garment's box on the ``cloth`` and the ``image`` (person) photo);
* ``fashionpedia``: a COCO-style Fashionpedia file (categories, attribute ids per garment, polygons or RLE); its
  attribute ids are joined by name to the ontology file (``categories:``,
  ``fashionpedia_category_attributes_descriptions.json``) whose ids the taxonomy's ``fashionpedia:`` mapping
  uses, so the sample file's own numbering (320 attributes) and the final one (294) both map. Garment parts
  (sleeve, neckline, collar, pocket...) give their attributes to the garment whose box holds them;
* ``deepfashion2``: DeepFashion2 in COCO form (the ``deepfashion2_to_coco`` conversion, e.g. mmpose's);
* ``modanet``: ModaNet's snaps file (``[{image_id, items: [...]}]``) or its COCO release, categories by id from
  ``categories.tsv`` (``categories:``).

How a source label becomes a taxonomy value, and what each data set's categories and tags are:
``lookbench_pipeline/data/label_sources.yaml`` (:class:`LabelMapper`). Nothing is guessed: a value the taxonomy
does not have, or that the garment's category does not allow, is kept in the label's ``unmapped`` list with the
reason (``no_taxonomy_value``, ``not_allowed_for_category``, ``conflicting_values``, ``unknown_tag``...); an
entry whose category does not map is counted unmapped with its reason (``unknown_category``,
``ambiguous_category``, ``not_in_taxonomy``, ``unknown_image``, ``part_without_garment``).

An entry describes a photo of the drop when one of the source's ``image_name`` templates (``str.format`` with
``{file_name}``, ``{stem}``, ``{image_id}``; relative to the drop folder) names a file of the drop. Per source:
``entries = mapped + unmapped + no_photo``. Boxes are ``[x1, y1, x2, y2]`` in the pixels of the photo as the data
set annotated it. A photo described by several garments (a street photo) is labelled with its largest garment
(box area), every mapped garment kept in the ``garments`` column with its box.

Precedence (docs/ANNOTATION.md): imported labels (``import:<kind>``) > the shop's facets (``facets:schema.org``,
``facets:items-sheet``) > an image model (``vlm:…``) > the catalogue text (``catalog-text/1``). The category comes
from the first source that gives one; each attribute from the first source whose category is that category;
every differing value of a later source is recorded in ``conflicts``. The catalogue text never fills an image
model's label (its "not visible" is an answer, and the judge checked only its labels).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import yaml

from .annotate import ANNOTATOR_TEXT, CatalogTextAnnotator, _pattern
# template_fields validates a config field, so it lives in config (config must not import this module)
from .config import TEMPLATE_FIELDS, ConfigError, template_fields  # noqa: F401
from .package_data import PACKAGE_DATA
from .taxonomy import Taxonomy, TaxonomyError

if TYPE_CHECKING:
    import pyarrow as pa

    from .config import AnnotationFileConfig, DropConfig

LABEL_SOURCES = PACKAGE_DATA / "label_sources.yaml"
KINDS = ("vitonhd", "fashionpedia", "deepfashion2", "modanet")
PART_SUPERCATEGORIES = ("garment parts", "closures", "decorations")
"""Fashionpedia supercategories whose objects are parts of a garment, not garments."""
FACETS_SCHEMA_ORG = "facets:schema.org"
FACETS_ITEMS_SHEET = "facets:items-sheet"


def annotator_of(kind: str) -> str:
    """The ``annotator`` of labels imported from a ``kind`` file: ``import:<kind>``."""
    return f"import:{kind}"


def rank(annotator: str) -> int:
    """Precedence of a label source, lower first: ``import:*`` 0, ``facets:*`` 1, an image model 2, the catalogue
    text 3."""
    if annotator.startswith("import:"):
        return 0
    if annotator.startswith("facets:"):
        return 1
    return 3 if annotator == ANNOTATOR_TEXT else 2


# ----------------------------------------------------------------------------------------------- the mapper


def _norm(text: Any) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().lower()


def _singular(text: str) -> str:
    """Each word's plural ``s`` dropped ("T-shirts" -> "T-shirt"; "dress" stays)."""
    return re.sub(r"\b(\w*[^\Ws])s\b", r"\1", text)


def _given(v: Any) -> bool:
    """A tag value that says something (``None``, ``""`` and VITON-HD's ``"None"`` say nothing)."""
    return v is not None and _norm(v) not in ("", "none", "null")


class LabelMapper:
    """Source labels -> taxonomy values, per ``label_sources.yaml`` and the taxonomy's synonyms and Fashionpedia
    ids.

    Raises:
        TaxonomyError: the mapping file names a category, attribute or value the taxonomy lacks, or an attribute
            the category does not carry (the message names the entry).
    """

    def __init__(self, taxonomy: Taxonomy, sources: str | Path = LABEL_SOURCES):
        self.tax = taxonomy
        self.text = CatalogTextAnnotator(taxonomy)
        self.spec = yaml.safe_load(Path(sources).read_text(encoding="utf-8"))
        self._check()

    def _check(self) -> None:
        for kind in ("deepfashion2", "modanet"):
            for name, m in (self.spec[kind]["categories"] or {}).items():
                if m is None:
                    continue
                if m.get("category") not in self.tax.categories:
                    raise TaxonomyError(f"label_sources {kind}.{name}: unknown category {m.get('category')!r}")
                for a, v in (m.get("attributes") or {}).items():
                    if v not in self.tax.categories[m["category"]].allowed.get(a, ()):
                        raise TaxonomyError(f"label_sources {kind}.{name}: {a}={v!r} is not a value of "
                                            f"{m['category']!r}")
        for name, c in self.spec["vitonhd"]["category_names"].items():
            if c not in self.tax.categories:
                raise TaxonomyError(f"label_sources vitonhd.category_names.{name}: unknown category {c!r}")
        for tag, attrs in self.spec["vitonhd"]["tags"].items():
            unknown = [a for a in attrs or [] if a not in self.tax.values]
            if unknown:
                raise TaxonomyError(f"label_sources vitonhd.tags.{tag}: unknown attributes {unknown}")
        for attr in self.spec["facets"]["names"]:
            if attr != "category" and attr not in self.tax.values:
                raise TaxonomyError(f"label_sources facets.names: unknown attribute {attr!r}")

    # --- words

    def category(self, raw: str) -> str | None:
        """The category a source's category or item name names (the taxonomy's category synonyms)."""
        return self.text.category_of(raw) or self.text.category_of(_singular(raw))

    def _match(self, category: str, attr: str, raw: str) -> str | None:
        allowed = self.tax.allowed(category, attr)
        norm = _norm(raw)
        key = re.sub(r"[\s-]+", "_", norm)
        if key in allowed:
            return key
        for v in allowed:
            if norm in self.tax.values[attr][v]:
                return v
        return self.text.value_of(category, attr, raw) or self.text.value_of(category, attr, _singular(raw))

    @cached_property
    def _any_value(self) -> dict[str, tuple[re.Pattern[str], set[str]]]:
        """Per attribute: a pattern of every value's phrases (any category) and the value names."""
        out = {}
        for attr, vals in self.tax.values.items():
            phrases = [p for syns in vals.values() for p in syns] + [v.replace("_", " ") for v in vals]
            out[attr] = (_pattern(phrases), set(vals))
        return out

    def value(self, category: str, attrs: Sequence[str], raw: str) -> tuple[str | None, str | None, str | None]:
        """``(attribute, value, None)`` for the first of ``attrs`` whose value ``raw`` names among the values
        ``category`` allows; else ``(None, None, reason)``: ``not_allowed_for_category`` (a value of one of
        ``attrs``, but not for this category) or ``no_taxonomy_value``."""
        carried = self.tax.categories[category].allowed
        for a in attrs:
            if a in carried:
                v = self._match(category, a, raw)
                if v is not None:
                    return a, v, None
        for a in attrs:
            pat, names = self._any_value[a]
            if re.sub(r"[\s-]+", "_", _norm(raw)) in names or pat.search(raw) or pat.search(_singular(raw)):
                return None, None, "not_allowed_for_category"
        return None, None, "no_taxonomy_value"

    # --- Fashionpedia

    @cached_property
    def _fp_categories(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for c in self.tax.categories.values():
            for name in c.fashionpedia:
                if out.setdefault(name, c.name) != c.name:
                    raise TaxonomyError(f"Fashionpedia category {name!r} is in both {out[name]!r} and {c.name!r}")
        return out

    @staticmethod
    def _by_key(mapping: dict[str, dict[str, tuple]]) -> dict[Any, list[tuple[str, str]]]:
        """``{attr: {value: keys}}`` turned around: key -> ``[(attr, value)]``."""
        out: dict[Any, list[tuple[str, str]]] = {}
        for attr, vals in mapping.items():
            for v, keys in vals.items():
                for k in keys:
                    out.setdefault(k, []).append((attr, v))
        return out

    @cached_property
    def _fp_ids(self) -> dict[int, list[tuple[str, str]]]:
        return self._by_key(self.tax.fashionpedia)

    @cached_property
    def _fp_named(self) -> dict[str, list[tuple[str, str]]]:
        return self._by_key(self.tax.fashionpedia_categories)

    def fashionpedia_category(self, name: str) -> str | None:
        """Our category of a Fashionpedia garment category (the taxonomy's ``fashionpedia:`` lists)."""
        return self._fp_categories.get(name)

    def fashionpedia_named(self, category: str, name: str, whole: bool) -> dict[str, str]:
        """What a Fashionpedia category name says about a garment of ``category`` (the taxonomy's
        ``fashionpedia_category:``): a part's ("pocket" -> details pockets), or a whole garment's own name when it
        names one garment ("cardigan" -> style cardigan; a group such as "top, t-shirt, sweatshirt" says nothing
        of the style). Values the category allows and that are the only one of their attribute."""
        if whole and "," in name:
            return {}
        found: dict[str, set[str]] = {}
        for a, v in self._fp_named.get(name, []):
            if v in self.tax.categories[category].allowed.get(a, ()):
                found.setdefault(a, set()).add(v)
        return {a: next(iter(vs)) for a, vs in found.items() if len(vs) == 1}

    def fashionpedia_attributes(self, category: str, ids: Iterable[tuple[str, int | None]]
                                ) -> tuple[dict[str, str], list[dict]]:
        """``(attributes, unmapped)`` of Fashionpedia attributes ``(name, ontology id)`` on a garment of
        ``category``. An id no value maps is ``no_taxonomy_value``; one whose values the category does not allow
        ``not_allowed_for_category``; an id missing from the ontology ``not_in_ontology``; two ids giving one
        attribute different values are both ``conflicting_values`` (neither kept)."""
        allowed = self.tax.categories[category].allowed
        found: dict[str, dict[str, list[str]]] = {}
        unmapped = []
        for label, cid in ids:
            if cid is None:
                unmapped.append({"name": "attribute", "value": label, "reason": "not_in_ontology"})
                continue
            pairs = self._fp_ids.get(cid, [])
            ok = [(a, v) for a, v in pairs if v in allowed.get(a, ())]
            if not ok:
                unmapped.append({"name": "attribute", "value": label,
                                 "reason": "not_allowed_for_category" if pairs else "no_taxonomy_value"})
            for a, v in ok:
                found.setdefault(a, {}).setdefault(v, []).append(label)
        attrs = {}
        for a, vals in found.items():
            if len(vals) == 1:
                attrs[a] = next(iter(vals))
            else:
                unmapped += [{"name": "attribute", "value": lb, "reason": "conflicting_values"}
                             for labels in vals.values() for lb in labels]
        return attrs, unmapped

    # --- a shop's facets

    def facet_attribute(self, name: str) -> str | None:
        """The attribute (or ``"category"``) a facet name names: an attribute's own name ("Sleeve length"), or one
        of ``label_sources.yaml`` ``facets.names``."""
        norm = re.sub(r"[\s_-]+", " ", _norm(name)).strip(" :")
        if norm.replace(" ", "_") in self.tax.values:
            return norm.replace(" ", "_")
        for attr, names in self.spec["facets"]["names"].items():
            if norm == attr or norm in (_norm(n) for n in names):
                return attr
        return None

    def facet_category(self, facets: Iterable[tuple[str, str]], category_text: str | None = None) -> str | None:
        """The category the facets (or an explicit category text) name, if any."""
        texts = [category_text] + [v for n, v in facets if self.facet_attribute(n) == "category"]
        for t in texts:
            if t and _given(t):
                c = self.category(str(t))
                if c is not None:
                    return c
        return None

    def facets(self, category: str, facets: Iterable[tuple[str, str]]) -> tuple[dict[str, str], list[dict]]:
        """``(attributes, unmapped)`` of a shop's facets on an item of ``category``. A facet name that is no
        attribute is ``unknown_facet``; category facets are not attributes (see :meth:`facet_category`)."""
        attrs: dict[str, str] = {}
        unmapped = []
        for name, raw in facets:
            if not _given(raw):
                continue
            attr = self.facet_attribute(name)
            if attr == "category":
                if self.category(str(raw)) not in (None, category):
                    unmapped.append({"name": name, "value": str(raw), "reason": "other_category"})
                continue
            if attr is None:
                unmapped.append({"name": name, "value": str(raw), "reason": "unknown_facet"})
                continue
            a, v, why = self.value(category, [attr], str(raw))
            if a is None:
                unmapped.append({"name": name, "value": str(raw), "reason": why})
            elif attrs.setdefault(a, v) != v:
                unmapped.append({"name": name, "value": str(raw), "reason": "conflicting_values"})
        return attrs, unmapped


# ------------------------------------------------------------------------------------------ annotation files


@dataclass
class Garment:
    """One entry of an annotation file (a garment, or a Fashionpedia garment part).

    ``reason`` is None when the entry maps (a garment to a category, a part to a garment, ``attached_to``); else
    why not. ``box``: ``[x1, y1, x2, y2]`` pixels on the annotated image of ``size`` ``(width, height)``."""

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


_JSON_CACHE: dict[tuple[str, int, int], Any] = {}


def _load_json(path: Path) -> Any:
    """A JSON file (cached by path, size and mtime: one file serves several sources). Raises ConfigError."""
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _JSON_CACHE:
            _JSON_CACHE.clear()
            _JSON_CACHE[key] = json.loads(path.read_bytes().decode("utf-8"))
        return _JSON_CACHE[key]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the annotation file ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc


def _number(v: Any) -> Any:
    """Numbers some conversions store as strings (``"[103, 80, 601, 669]"``, ``"0"``) back to numbers."""
    from .detect import _num

    return _num(v)


def _xyxy(v: Any) -> list[float] | None:
    """A COCO ``[x, y, width, height]`` as ``[x1, y1, x2, y2]``; None unless four finite numbers, width and height
    above 0."""
    v = _number(v)
    if not (isinstance(v, list) and len(v) == 4 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                        for x in v)):
        return None
    x, y, w, h = (float(t) for t in v)
    if not all(math.isfinite(t) for t in (x, y, w, h)) or w <= 0 or h <= 0:
        return None
    return [x, y, x + w, y + h]


def _coco_box(a: dict) -> list[float] | None:
    from .detect import segmentation_box

    box = _xyxy(a.get("bbox"))
    if box is None:
        try:
            box = segmentation_box(a.get("segmentation"))
        except (TypeError, ValueError, KeyError, IndexError):
            box = None
    return box


def _size(im: dict) -> tuple[int, int] | None:
    w, h = _number(im.get("width")), _number(im.get("height"))
    return (int(w), int(h)) if isinstance(w, (int, float)) and isinstance(h, (int, float)) and w > 0 and h > 0 \
        else None


def _coco(path: Path, data: Any, what: str) -> tuple[dict[Any, dict], list[dict]]:
    """``(images by id, annotations)`` of a COCO-style file. Raises ConfigError naming the file and entry."""
    if not (isinstance(data, dict) and isinstance(data.get("images"), list)
            and isinstance(data.get("annotations"), list)):
        raise ConfigError(f"{path}: not a COCO-style {what} file (an object with 'images' and 'annotations' lists)")
    images = {}
    for i, im in enumerate(data["images"]):
        if not isinstance(im, dict) or "id" not in im:
            raise ConfigError(f"{path}: images[{i}] has no 'id'")
        images[_number(im["id"])] = im
    for j, a in enumerate(data["annotations"]):
        if not isinstance(a, dict) or "image_id" not in a or "category_id" not in a:
            raise ConfigError(f"{path}: annotations[{j}] (id {a.get('id') if isinstance(a, dict) else None}) needs "
                              "'image_id' and 'category_id'")
    return images, data["annotations"]


def _named_list(path: Path, data: Any, key: str) -> dict[Any, dict]:
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"{path}: no '{key}' list")
    out = {}
    for i, c in enumerate(items):
        cid = _number(c.get("id")) if isinstance(c, dict) else None
        if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(c.get("name"), str):
            raise ConfigError(f"{path}: {key}[{i}] needs an integer 'id' and a 'name'")
        out[cid] = c
    return out


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
        g.box, g.size = _vitonhd_box(e.get("image"), view)
        if e.get("image") is not None and g.box is None:
            g.unmapped.append({"name": "bbox", "value": view, "reason": "no_box"})
        out.append(g)
    return AnnotationFile("vitonhd", path, out)


def _vitonhd_box(images: Any, view: str) -> tuple[list[float] | None, tuple[int, int] | None]:
    """The box (pixels) of the ``view`` image: its ``bbox`` is fractions of ``image_width`` × ``image_height``."""
    for im in images if isinstance(images, list) else []:
        if not isinstance(im, dict) or im.get("image_path") != view:
            continue
        size = _size({"width": im.get("image_width"), "height": im.get("image_height")})
        b = im.get("bbox")
        keys = ("left", "top", "width", "height")
        if size is None or not isinstance(b, dict) or not all(
                isinstance(b.get(k), (int, float)) and not isinstance(b.get(k), bool) and math.isfinite(b[k])
                for k in keys):
            return None, size
        w, h = size
        x1, y1 = b["left"] * w, b["top"] * h
        x2, y2 = x1 + b["width"] * w, y1 + b["height"] * h
        if b["width"] <= 0 or b["height"] <= 0:
            return None, size
        return [round(max(0.0, x1), 2), round(max(0.0, y1), 2), round(min(float(w), x2), 2),
                round(min(float(h), y2), 2)], size
    return None, None


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
        if im is None:
            g.reason = "unknown_image"
        else:
            _mapped_category(mapper, "deepfashion2", g, cat["name"] if cat else None)
        out.append(g)
    return AnnotationFile("deepfashion2", path, out)


def read_modanet_categories(path: Path) -> dict[int, str]:
    """``categories.tsv`` (``id<TAB>name`` with a header line): id -> name. Raises ConfigError."""
    try:
        rows = list(csv.reader(path.read_text(encoding="utf-8").splitlines(), delimiter="\t"))
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
            if not isinstance(snap, dict) or "image_id" not in snap or not isinstance(snap.get("items"), list):
                raise ConfigError(f"{path}: [{i}] is not a ModaNet snap ({{image_id, items: [...]}})")
            fname = Path(str(snap["snap_url"])).name if snap.get("snap_url") else None
            for k, it in enumerate(snap["items"]):
                if not isinstance(it, dict) or "category_id" not in it:
                    raise ConfigError(f"{path}: image {snap['image_id']} item {k} has no 'category_id'")
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
        g = Garment(entry=f"{path.name}#{entry}", file_name=fname, image_id=iid, source_category=name or str(cid),
                    box=_coco_box(it), size=size)
        if not known:
            g.reason = "unknown_image"
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


# ------------------------------------------------------------------------------------ photos of a drop


def photo_names(g: Garment, templates: Sequence[str]) -> list[str]:
    """The drop-relative file names ``g``'s templates give (a template needing a field the entry lacks gives
    none)."""
    values = {"file_name": g.file_name, "stem": Path(g.file_name).stem if g.file_name else None,
              "image_id": g.image_id}
    out = []
    for t in templates:
        if any(values[f] in (None, "") for f in template_fields(t)):
            continue
        try:
            out.append(Path(t.format(**values)).as_posix())
        except (ValueError, TypeError):  # a format spec that does not fit this entry's value ({image_id:08d})
            continue
    return list(dict.fromkeys(out))


@dataclass
class DropImport:
    """A drop's imported labels: per photo (the resolved absolute path, as ``drop_items.path``) its candidate label
    rows, one per annotation source that describes it; ``counts`` per source."""

    photos: dict[str, list[dict]]
    counts: dict[str, dict[str, Any]]


def import_drop(drop: "DropConfig", mapper: LabelMapper) -> DropImport:
    """Read every annotation file of ``drop`` and match its entries to the drop's files.

    Counts per source (``<kind>:<file name>[#view]``): ``entries = mapped + unmapped + no_photo`` (an entry whose
    image names no file of the drop is ``no_photo``; ``unmapped.<reason>``), ``photos`` (files described).

    Raises:
        ConfigError: a file is unreadable or malformed (the message names it and the entry).
    """
    from .drops import files

    photos = {rel: str(p.resolve()) for _, rel, p in files(drop)}
    out: dict[str, list[dict]] = {}
    counts: dict[str, dict[str, Any]] = {}
    for src in drop.annotations:
        af = read_annotation_file(src, mapper)
        by_photo: dict[str, list[Garment]] = {}
        c: Counter = Counter(entries=len(af.garments))
        for g in af.garments:
            rels = [r for r in photo_names(g, src.image_name) if r in photos] if g.reason != "unknown_image" else []
            if g.reason == "unknown_image":
                c["unmapped"] += 1
                c["unmapped.unknown_image"] += 1
                continue
            if not rels:
                c["no_photo"] += 1
                continue
            if g.reason is None:
                c["mapped"] += 1
            else:
                c["unmapped"] += 1
                c[f"unmapped.{g.reason}"] += 1
            for r in rels:
                by_photo.setdefault(r, []).append(g)
        labelled = 0
        for rel, gs in sorted(by_photo.items()):
            row = photo_label(gs, af.annotator, mapper.tax.version)
            labelled += row["status"] == "labelled"
            out.setdefault(photos[rel], []).append(row)
        name = f"{src.kind}:{Path(src.path).name}" + (f"#{src.view}" if src.kind == "vitonhd" else "")
        counts[name] = {"mapped": 0, "unmapped": 0, "no_photo": 0, **dict(sorted(c.items())),
                        "photos": len(by_photo), "photos_labelled": labelled}
        cc = counts[name]
        assert cc["entries"] == cc["mapped"] + cc["unmapped"] + cc["no_photo"], cc
    return DropImport(out, counts)


def photo_label(garments: Sequence[Garment], annotator: str, taxonomy_version: str) -> dict[str, Any]:
    """One photo's label row from the entries that describe it: its largest mapped garment (box area; the first
    on a tie) gives category, attributes and box; every mapped garment is in ``garments``; every unmapped value
    and entry in ``unmapped``. No mapped garment: ``rejected`` with ``<annotator>:<reason of the first entry>``."""
    whole = [g for g in garments if not g.part and g.reason is None]
    unmapped = [u for g in garments for u in g.unmapped]
    unmapped += [{"name": "part", "value": g.source_category, "reason": g.reason} for g in garments
                 if g.part and g.reason is not None]
    row: dict[str, Any] = {"status": "rejected", "reason": None, "category": None, "attributes": [],
                           "annotator": annotator, "taxonomy_version": taxonomy_version,
                           "garments": [g.struct() for g in whole], "unmapped": unmapped}
    if not whole:
        first = next((g.reason for g in garments if g.reason), "no_garment")
        row["reason"] = f"{annotator}:{first}"
        return row
    main = max(enumerate(whole), key=lambda ig: (ig[1].area, -ig[0]))[1]
    row.update(status="labelled", category=main.category, box=main.box,
               attributes=[{"name": k, "value": v} for k, v in sorted(main.attributes.items())])
    return row


# --------------------------------------------------------------------------------- facets and precedence


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


def check_drop(drop: "DropConfig", taxonomy: Taxonomy) -> dict[str, dict[str, Any]]:
    """Read every annotation file of ``drop`` (``lookbench build`` calls it before any run, as it does the item
    sheet): the per-source counts. Raises ConfigError naming the file and the entry."""
    if not drop.annotations:
        return {}
    try:
        return import_drop(drop, LabelMapper(taxonomy)).counts
    except ConfigError as exc:
        raise ConfigError(f"drop {drop.name!r}: {exc}") from exc
