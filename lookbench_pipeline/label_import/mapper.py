"""Source labels onto the taxonomy (:class:`LabelMapper`, per ``lookbench_pipeline/data/label_sources.yaml`` and
the taxonomy's synonyms and Fashionpedia ids) and the precedence rank of a label source (:func:`rank`). The bottom
module of :mod:`lookbench_pipeline.label_import`: it imports no sibling."""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from ..annotate import ANNOTATOR_TEXT, CatalogTextAnnotator, _pattern
from ..package_data import PACKAGE_DATA
from ..taxonomy import Taxonomy, TaxonomyError

LABEL_SOURCES = PACKAGE_DATA / "label_sources.yaml"
KINDS = ("vitonhd", "fashionpedia", "deepfashion2", "modanet")


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
