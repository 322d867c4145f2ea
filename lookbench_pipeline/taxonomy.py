"""The category and attribute taxonomy (a versioned YAML data file) and the JSON schemas derived from it.

Two file layouts load (``lookbench_pipeline/data/taxonomy_v1.yaml`` and ``taxonomy_v2.yaml`` are examples):

* version 1: ``shared_attributes`` / ``attributes`` map each attribute to ``{value: [synonyms]}``; a category lists
  attribute names and carries every value of each;
* version 2: ``attributes`` map each attribute to ``{description, values: {value: {synonyms, fashionpedia,
  fashionpedia_category}}}``; a category maps each attribute it carries to ``all`` or the list of its values, so
  a category's JSON schema offers only the values that apply to it (a skirt's length is never ``full_length``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from .package_data import DEFAULT_TAXONOMY


class TaxonomyError(ValueError):
    """The taxonomy file is inconsistent (the message names the category or attribute)."""


@dataclass(frozen=True)
class Category:
    """One category: its attributes in order, and per attribute the values that apply (``allowed``)."""

    name: str
    synonyms: tuple[str, ...]
    main_attribute: str
    attributes: tuple[str, ...]
    fashionpedia: tuple[str, ...] = ()
    allowed: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, hash=False, compare=False)


@dataclass(frozen=True)
class Taxonomy:
    """Categories, and per attribute the allowed values with their synonyms.

    ``values[attr]`` maps each value to its synonyms (lower-case phrases); ``fashionpedia[attr][value]`` to the
    Fashionpedia attribute ids it corresponds to (may be empty); ``fashionpedia_categories[attr][value]`` to
    Fashionpedia category names (garment parts, decorations); ``descriptions[attr]`` is a one-line definition.
    """

    version: str
    not_visible: str
    categories: dict[str, Category]
    values: dict[str, dict[str, tuple[str, ...]]] = field(repr=False)
    fashionpedia: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict, repr=False)
    fashionpedia_categories: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    descriptions: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: str | Path = DEFAULT_TAXONOMY) -> "Taxonomy":
        """Load and validate a taxonomy file. Raises TaxonomyError (or FileNotFoundError)."""
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or "categories" not in raw or "version" not in raw:
            raise TaxonomyError(f"{path}: a taxonomy needs 'version' and 'categories'")
        values: dict[str, dict[str, tuple[str, ...]]] = {}
        fp: dict[str, dict[str, tuple[int, ...]]] = {}
        fp_cat: dict[str, dict[str, tuple[str, ...]]] = {}
        desc: dict[str, str] = {}
        for group in ("shared_attributes", "attributes"):
            for attr, spec in (raw.get(group) or {}).items():
                if attr in values:
                    raise TaxonomyError(f"attribute {attr!r} defined twice")
                if isinstance(spec, dict) and isinstance(spec.get("values"), dict):  # version 2 layout
                    desc[attr] = str(spec.get("description", ""))
                    vals = spec["values"]
                else:
                    vals = spec or {}
                if not vals:
                    raise TaxonomyError(f"attribute {attr!r} has no values")
                values[attr], fp[attr], fp_cat[attr] = {}, {}, {}
                for v, vs in vals.items():
                    v = str(v)
                    if isinstance(vs, dict):
                        syn = vs.get("synonyms")
                        ids = vs.get("fashionpedia") or []
                        if not all(isinstance(i, int) for i in ids):
                            raise TaxonomyError(f"{attr}={v}: fashionpedia ids must be integers, got {ids}")
                        fp[attr][v] = tuple(ids)
                        fp_cat[attr][v] = tuple(str(c) for c in vs.get("fashionpedia_category") or [])
                    else:
                        syn = vs
                        fp[attr][v], fp_cat[attr][v] = (), ()
                    syns = [v.replace("_", " ")] if syn is None else syn
                    values[attr][v] = tuple(str(s).lower() for s in syns)
        cats: dict[str, Category] = {}
        for name, c in raw["categories"].items():
            spec = c.get("attributes") or []
            allowed: dict[str, tuple[str, ...]] = {}
            for item in (spec.items() if isinstance(spec, dict) else ((a, "all") for a in spec)):
                a, sel = item
                if a not in values:
                    raise TaxonomyError(f"category {name!r} uses undefined attribute {a!r}")
                if sel == "all":
                    allowed[a] = tuple(values[a])
                else:
                    unknown = [v for v in sel if v not in values[a]]
                    if unknown:
                        raise TaxonomyError(f"category {name!r}: {a} values {unknown} are not values of {a!r}")
                    if len(set(sel)) != len(sel):
                        raise TaxonomyError(f"category {name!r}: {a} lists a value twice")
                    allowed[a] = tuple(sel)
                seen: dict[str, str] = {}
                for v in allowed[a]:  # the text annotator must read each phrase as one value within a category
                    for s in values[a][v]:
                        if seen.setdefault(s, v) != v:
                            raise TaxonomyError(f"category {name!r}: phrase {s!r} is a synonym of both "
                                                f"{a}={seen[s]!r} and {a}={v!r}")
            attrs = tuple(allowed)
            if c["main_attribute"] not in attrs:
                raise TaxonomyError(f"category {name!r}: main_attribute {c['main_attribute']!r} not in its attributes")
            cats[name] = Category(
                name=name,
                synonyms=tuple(s.lower() for s in c.get("synonyms", [name])),
                main_attribute=c["main_attribute"],
                attributes=attrs,
                fashionpedia=tuple(c.get("fashionpedia", [])),
                allowed=allowed,
            )
        return cls(version=str(raw["version"]), not_visible=raw.get("not_visible", "not visible"),
                   categories=cats, values=values, fashionpedia=fp, fashionpedia_categories=fp_cat,
                   descriptions=desc)

    @cached_property
    def n_attribute_values(self) -> int:
        """Number of distinct (attribute, value) pairs."""
        return sum(len(v) for v in self.values.values())

    def allowed(self, category: str, attribute: str) -> tuple[str, ...]:
        """The values ``attribute`` may take for ``category`` (without ``not_visible``). Raises KeyError."""
        return self.categories[category].allowed[attribute]

    def json_schema(self, category: str) -> dict[str, Any]:
        """JSON schema (draft 2020-12) of one category's labels: an object with one string enum per attribute of
        the category (its allowed values and ``not_visible``), every attribute required, nothing else allowed.

        This is the structured-output constraint an image annotator is sent. Raises KeyError for an unknown
        category.
        """
        cat = self.categories[category]
        props = {
            a: {"type": "string", "enum": [*cat.allowed[a], self.not_visible]} for a in cat.attributes
        }
        return {
            "title": f"lookbench_{category}_v{self.version}",
            "type": "object",
            "properties": props,
            "required": list(cat.attributes),
            "additionalProperties": False,
        }

    def validate_labels(self, category: str, labels: dict[str, str]) -> list[str]:
        """Problems with ``labels`` for ``category`` (empty when valid)."""
        if category not in self.categories:
            return [f"unknown category {category!r}"]
        cat = self.categories[category]
        errs = []
        for a, v in labels.items():
            if a not in cat.attributes:
                errs.append(f"attribute {a!r} not used by {category!r}")
            elif v != self.not_visible and v not in cat.allowed[a]:
                errs.append(f"{a}={v!r} not an allowed value for {category!r}")
        return errs
