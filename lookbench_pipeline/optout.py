"""Page-level opt-outs: the robots directives of an ``X-Robots-Tag`` header and of ``<meta name="robots">``.

What a page says about itself, beyond robots.txt (which says whether it may be fetched at all):

- ``noindex`` (or ``none``): the page must not be indexed; a benchmark is an index, so the page's products and
  looks are not kept (the crawl log records ``robots_noindex``).
- ``noimageindex`` (or ``none``, or ``noai`` / ``noimageai``, the AI-training opt-outs): the page's images are not
  kept (``robots_noimageindex``); its text may still be.

Directives count when they are generic (``X-Robots-Tag: noindex``, ``<meta name="robots">``), addressed to our
user agent (``X-Robots-Tag: lookbenchbot: noindex``, ``<meta name="lookbenchbot">``), or addressed to Googlebot
(``googlebot: noindex``, ``<meta name="googlebot">``): many shops write only the latter, and reading "do not index"
for the best-known crawler as meant for all crawlers is the cautious reading. Sources: Google Search Central,
"Robots meta tag, data-nosnippet, and X-Robots-Tag specifications"; the ``noai`` / ``noimageai`` values as
DeviantArt proposed them (2022).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NOINDEX = "robots_noindex"
NOIMAGEINDEX = "robots_noimageindex"
_AGENTS = ("googlebot",)


def agent_token(user_agent: str) -> str:
    """The product token of a user agent string (``"LookBenchBot/0.1 (+https://…)"`` -> ``"lookbenchbot"``)."""
    return re.split(r"[/\s;(]", user_agent.strip(), maxsplit=1)[0].lower()


def directives(header_values: Iterable[str], meta: Iterable[tuple[str, str]], agent: str) -> set[str]:
    """The directives that apply to ``agent`` (a product token, ``agent_token``), lower-case.

    Args:
        header_values: every ``X-Robots-Tag`` header value (a value may be scoped: ``"googlebot: noindex"``;
            an unscoped directive after a scoped one in the same value belongs to that scope, as Google reads it).
        meta: ``(name, content)`` of every ``<meta>`` whose ``name`` is ``robots`` or a crawler's token.
        agent: our product token.
    """
    ours = {"robots", agent, *_AGENTS}
    out: set[str] = set()
    for value in header_values:
        scope = None
        for part in value.split(","):
            part = part.strip().lower()
            if not part:
                continue
            m = re.match(r"^([a-z0-9_\-]+)\s*:\s*(.*)$", part)
            if m and m.group(1) not in ("unavailable_after", "max-snippet", "max-image-preview",
                                         "max-video-preview"):
                scope, part = m.group(1), m.group(2).strip()
            if scope is None or scope in ours:
                out.add(part)
    for name, content in meta:
        if (name or "").strip().lower() in ours:
            out.update(p.strip().lower() for p in (content or "").split(",") if p.strip())
    return out


def page_optout(header_values: Iterable[str], meta: Iterable[tuple[str, str]], agent: str) -> str | None:
    """``robots_noindex`` when the page must not be kept, ``robots_noimageindex`` when only its images must not
    be, else None."""
    d = directives(header_values, meta, agent)
    if d & {"noindex", "none"}:
        return NOINDEX
    if d & {"noimageindex", "noai", "noimageai"}:
        return NOIMAGEINDEX
    return None


def html_optout(header_values: Iterable[str], html: str, agent: str) -> str | None:
    """``page_optout`` of a page: its ``X-Robots-Tag`` values and the robots ``<meta>`` tags of its HTML (generic,
    ``googlebot`` and ``agent``); the one rule the live crawl and the archive extraction both apply."""
    from parsel import Selector

    names = {"robots", agent, *_AGENTS}
    meta = [(m.attrib.get("name", ""), m.attrib.get("content", ""))
            for m in Selector(text=html).xpath("//meta[@name and @content]")
            if m.attrib.get("name", "").strip().lower() in names]
    return page_optout(header_values, meta, agent)
