"""Attribute annotation. The baseline annotator maps a product's own catalogue text to the taxonomy.

It reads the title, the shop's category text, the colour and material fields and the description, and matches the
taxonomy's synonyms on word boundaries. It never guesses: an attribute with no matching phrase is left out (unknown),
which Fine Recall treats as "not carried" (docs/METRICS.md). Every label row names its annotator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .taxonomy import Taxonomy

ANNOTATOR_TEXT = "catalog-text/1"


@dataclass
class Label:
    """One item's labels: ``status`` is ``labelled`` or ``rejected`` (then ``reason`` says why).

    :meth:`row` gives the first columns of ``schemas.ANNOTATIONS``; the image model's label
    (``lookbench_pipeline.vlm.VlmLabel``) is a subclass that adds its fields and columns after these."""

    item_id: str
    status: str
    reason: str | None
    category: str | None
    attributes: dict[str, str]
    annotator: str
    taxonomy_version: str

    def row(self) -> dict[str, Any]:
        return {
            "item_id": self.item_id,
            "status": self.status,
            "reason": self.reason,
            "category": self.category,
            "attributes": [{"name": k, "value": v} for k, v in sorted(self.attributes.items())],
            "annotator": self.annotator,
            "taxonomy_version": self.taxonomy_version,
        }


def _pattern(phrases: list[str]) -> re.Pattern[str]:
    alts = sorted(set(phrases), key=len, reverse=True)
    return re.compile(r"(?<![\w])(" + "|".join(re.escape(p) for p in alts) + r")(?![\w])", re.IGNORECASE)


class CatalogTextAnnotator:
    """Labels from catalogue text (title, category text, colour, material, description)."""

    name = ANNOTATOR_TEXT

    def __init__(self, taxonomy: Taxonomy):
        self.tax = taxonomy

    @cached_property
    def _category_patterns(self) -> dict[str, tuple[re.Pattern[str], dict[str, str]]]:
        lookup = {s: c.name for c in self.tax.categories.values() for s in c.synonyms}
        return {"_": (_pattern(list(lookup)), lookup)}

    @cached_property
    def _value_patterns(self) -> dict[tuple[str, str], tuple[re.Pattern[str] | None, dict[str, str]]]:
        """Per (category, attribute): a pattern of the phrases of the values that apply to the category."""
        out = {}
        for cat in self.tax.categories.values():
            for attr, allowed in cat.allowed.items():
                lookup = {s: v for v in allowed for s in self.tax.values[attr][v]}
                out[(cat.name, attr)] = (_pattern(list(lookup)) if lookup else None, lookup)
        return out

    def category_of(self, *texts: str | None) -> str | None:
        """The category named in the first text that names one; within a text the last-ending match wins (the
        head noun of "t-shirt dress" is "dress"), ties broken by the longer phrase."""
        pat, lookup = self._category_patterns["_"]
        for text in texts:
            if not text:
                continue
            matches = list(pat.finditer(text))
            if matches:
                best = max(matches, key=lambda m: (m.end(), len(m.group(1))))
                return lookup[best.group(1).lower()]
        return None

    def value_of(self, category: str, attr: str, *texts: str | None) -> str | None:
        """The value of ``attr`` named first in the first text that names one of the category's values."""
        pat, lookup = self._value_patterns[(category, attr)]
        if pat is None:
            return None
        for text in texts:
            if text:
                m = pat.search(text)
                if m:
                    return lookup[m.group(1).lower()]
        return None

    def annotate(self, item_id: str, title: str | None = None, description: str | None = None,
                 category_text: str | None = None, color: str | None = None,
                 material: str | None = None) -> Label:
        """Label one item from its text. Rejected with ``no_text`` or ``no_category_match`` when it cannot be."""
        if not any((title, description, category_text)):
            return Label(item_id, "rejected", "no_text", None, {}, self.name, self.tax.version)
        category = self.category_of(title, category_text, description)
        if category is None:
            return Label(item_id, "rejected", "no_category_match", None, {}, self.name, self.tax.version)
        attrs: dict[str, str] = {}
        for attr in self.tax.categories[category].attributes:
            first = {"color": color, "material": material}.get(attr)
            v = self.value_of(category, attr, first, title, description)
            if v is not None:
                attrs[attr] = v
        return Label(item_id, "labelled", None, category, attrs, self.name, self.tax.version)


def format_main_attribute(tax: Taxonomy, category: str | None, attrs: dict[str, str]) -> tuple[str, str]:
    """LookBench's ``main_attribute`` and ``other_attributes`` strings: ``"name: value"`` and
    ``"name: value; name: value"`` (sorted by name); an absent main attribute is ``"name: not visible"``."""
    if not category or category not in tax.categories:
        return "", "; ".join(f"{k}: {v}" for k, v in sorted(attrs.items()))
    main = tax.categories[category].main_attribute
    main_s = f"{main}: {attrs.get(main, tax.not_visible)}"
    other = "; ".join(f"{k}: {v}" for k, v in sorted(attrs.items()) if k != main)
    return main_s, other


def label_counts(rows: list[dict]) -> dict[str, Any]:
    """Counts of ``schemas.ANNOTATIONS`` rows: ``items = labelled + rejected + failed``, per reason
    (``<status>.<reason>``) and per category (``category.<c>``)."""
    counts: dict[str, Any] = {"items": len(rows), "labelled": 0, "rejected": 0, "failed": 0}
    for r in rows:
        counts[r["status"]] += 1
        if r["reason"]:
            counts[f"{r['status']}.{r['reason']}"] = counts.get(f"{r['status']}.{r['reason']}", 0) + 1
        if r["category"]:
            counts[f"category.{r['category']}"] = counts.get(f"category.{r['category']}", 0) + 1
    assert counts["items"] == counts["labelled"] + counts["rejected"] + counts["failed"]
    return counts
