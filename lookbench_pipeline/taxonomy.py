"""The category and attribute taxonomy (a versioned YAML data file) and the JSON schemas derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from .config import DEFAULT_TAXONOMY


class TaxonomyError(ValueError):
    """The taxonomy file is inconsistent (the message names the category or attribute)."""


@dataclass(frozen=True)
class Category:
    name: str
    synonyms: tuple[str, ...]
    main_attribute: str
    attributes: tuple[str, ...]
    fashionpedia: tuple[str, ...] = ()


@dataclass(frozen=True)
class Taxonomy:
    """Categories, and per category the attributes with their allowed values.

    ``values[attr]`` maps each allowed value to its synonyms (lower-case phrases).
    """

    version: str
    not_visible: str
    categories: dict[str, Category]
    values: dict[str, dict[str, tuple[str, ...]]] = field(repr=False)

    @classmethod
    def load(cls, path: str | Path = DEFAULT_TAXONOMY) -> "Taxonomy":
        """Load and validate a taxonomy file. Raises TaxonomyError (or FileNotFoundError)."""
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        values: dict[str, dict[str, tuple[str, ...]]] = {}
        for group in ("shared_attributes", "attributes"):
            for attr, vals in (raw.get(group) or {}).items():
                if attr in values:
                    raise TaxonomyError(f"attribute {attr!r} defined twice")
                values[attr] = {str(v): tuple(str(s).lower() for s in syn or [v]) for v, syn in vals.items()}
        cats: dict[str, Category] = {}
        for name, c in raw["categories"].items():
            attrs = tuple(c["attributes"])
            for a in attrs:
                if a not in values:
                    raise TaxonomyError(f"category {name!r} uses undefined attribute {a!r}")
            if c["main_attribute"] not in attrs:
                raise TaxonomyError(f"category {name!r}: main_attribute {c['main_attribute']!r} not in its attributes")
            cats[name] = Category(
                name=name,
                synonyms=tuple(s.lower() for s in c.get("synonyms", [name])),
                main_attribute=c["main_attribute"],
                attributes=attrs,
                fashionpedia=tuple(c.get("fashionpedia", [])),
            )
        return cls(version=str(raw["version"]), not_visible=raw.get("not_visible", "not visible"),
                   categories=cats, values=values)

    @cached_property
    def n_attribute_values(self) -> int:
        """Number of distinct (attribute, value) pairs."""
        return sum(len(v) for v in self.values.values())

    def json_schema(self, category: str) -> dict[str, Any]:
        """JSON schema for one category's labels: an object with one enum per attribute ("not visible" allowed).

        Raises KeyError for an unknown category.
        """
        cat = self.categories[category]
        props = {
            a: {"type": "string", "enum": [*self.values[a].keys(), self.not_visible]} for a in cat.attributes
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
            elif v != self.not_visible and v not in self.values[a]:
                errs.append(f"{a}={v!r} not an allowed value")
        return errs
