"""The bottom of ``extract`` (imports no sibling): lenient JSON-LD parsing (``parse_jsonld_block``) and the
helpers that read schema.org trees as JSON-LD, microdata and RDFa give them (``_walk``, ``_types``, ``_first``,
``_text``, ``_short_keys`` for RDFa's full-IRI keys)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

SYNTAXES = ["microdata", "rdfa", "opengraph"]  # JSON-LD is parsed here, leniently (see parse_jsonld)
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>")
_WRAPPERS = re.compile(r"/\*\s*<!\[CDATA\[\s*\*/|/\*\s*\]\]>\s*\*/|(?://\s*)?<!\[CDATA\[|(?://\s*)?\]\]>|<!--|-->")


def parse_jsonld_block(raw: str) -> tuple[Any | None, str | None]:
    """Parse one JSON-LD block the way browsers and search engines tolerate it; returns ``(data, None)`` or
    ``(None, reason)``.

    Strict JSON first (``strict=False``: raw control characters inside strings allowed); then, with CDATA and
    comment wrappers (``/*<![CDATA[*/ … /*]]>*/``, ``<!-- … -->``) removed, ``chompjs`` reads what JavaScript would:
    trailing commas and semicolons, comments, single quotes, unquoted keys, ``undefined``; several concatenated
    objects (``{…}{…}``) come back as a list. Reasons: ``jsonld_empty``, ``jsonld_too_deep`` (nesting past the
    parser's recursion limit), ``jsonld_parse_error``."""
    import chompjs

    text = raw.strip()
    for attempt in (text, _WRAPPERS.sub("", text).strip().rstrip(";").strip()):
        if not attempt:
            return None, "jsonld_empty"
        try:
            return json.loads(attempt, strict=False), None
        except RecursionError:
            return None, "jsonld_too_deep"
        except ValueError:  # json.JSONDecodeError, or a number too long to convert
            continue
    cleaned = attempt
    try:
        docs = list(chompjs.parse_js_objects(cleaned, loader_kwargs={"strict": False}))
    except RecursionError:
        return None, "jsonld_too_deep"
    except Exception:  # chompjs raises ValueError, and its C scanner other errors, on what is not JavaScript data
        docs = []
    docs = [d for d in docs if isinstance(d, (dict, list)) and d]
    if not docs:
        return None, "jsonld_parse_error"
    return (docs[0] if len(docs) == 1 else docs), None


def parse_jsonld(raw: str) -> Any | None:
    """``parse_jsonld_block`` without the reason: the parsed block, or None when it is not data."""
    return parse_jsonld_block(raw)[0]


def _short_keys(node: Any) -> Any:
    """RDFa as extruct gives it keys properties by full IRI (``https://schema.org/name``); use the local name."""
    if isinstance(node, list):
        return [_short_keys(x) for x in node]
    if isinstance(node, dict):
        return {(k.rsplit("/", 1)[-1].rsplit("#", 1)[-1] if "://" in k else k): _short_keys(v) for k, v in node.items()}
    return node


def _types(node: dict) -> set[str]:
    t = node.get("@type") or node.get("type") or []
    if not isinstance(t, list):
        t = [t]
    out = set()
    for x in t:
        if isinstance(x, str):
            out.add(x.rsplit("/", 1)[-1].rsplit("#", 1)[-1].lower())
    return out


def _walk(node: Any) -> Iterator[dict]:
    """Every dict in a JSON-LD / microdata tree (``@graph``, lists, nested values)."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def _first(v: Any) -> Any:
    while isinstance(v, list):
        if not v:
            return None
        v = v[0]
    return v


def _text(v: Any) -> str | None:
    v = _first(v)
    if isinstance(v, dict):
        v = v.get("name") or v.get("@value") or v.get("value")
        v = _first(v)
    if v is None:
        return None
    s = re.sub(r"\s+", " ", str(v)).strip()
    return s or None
