"""The questions put to the model and the judge: the prompt versions (part of every cache key), the system
prompt, each question's text and the JSON schema that constrains its answer, and the chat messages that carry
them. Imports no other module of the package.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..taxonomy import Taxonomy

PROMPT_VERSION = "lookbench-annotate/1"
"""Version of the annotation prompts (category, attributes, re-annotation); part of every cache key. Bump it when
a prompt's wording or the sampling parameters change."""
JUDGE_PROMPT_VERSION = "lookbench-judge/1"
"""Version of the judge prompt; part of the judge's cache keys."""

NONE_CATEGORY = "none"
"""The category answer for an image that shows no fashion item."""
ACCEPT, REJECT = "accept", "reject"
"""The judge's two verdicts on a label."""


SYSTEM_PROMPT = ("You label fashion product images for a retrieval benchmark. Look only at the image. Answer with "
                 "JSON that matches the given schema and nothing else.")


def _values_line(tax: Taxonomy, category: str, attr: str, exclude: str | None = None) -> str:
    vals = [v for v in tax.allowed(category, attr) if v != exclude]
    desc = tax.descriptions.get(attr)
    return f"- {attr}{f' ({desc})' if desc else ''}: {', '.join(vals)}"


def category_prompt(tax: Taxonomy, boxed: bool) -> str:
    lines = [f"- {c.name}: {', '.join(c.synonyms[:8])}" for c in tax.categories.values()]
    subject = "the item in this crop" if boxed else "the main fashion item in this image"
    return (f"Which category is {subject}? Choose one of these categories (examples after each), or "
            f"\"{NONE_CATEGORY}\" if the image shows no fashion item.\n" + "\n".join(lines))


def category_schema(tax: Taxonomy) -> dict[str, Any]:
    """Schema of the category question: ``{"category": <one of the categories or "none">}``."""
    return {"title": f"lookbench_category_v{tax.version}", "type": "object",
            "properties": {"category": {"type": "string", "enum": [*tax.categories, NONE_CATEGORY]}},
            "required": ["category"], "additionalProperties": False}


def attributes_prompt(tax: Taxonomy, category: str, boxed: bool) -> str:
    lines = [_values_line(tax, category, a) for a in tax.categories[category].attributes]
    subject = f"the {category} in this crop" if boxed else f"the {category} in this image"
    return (f"Label {subject}. For each attribute choose exactly one of the listed values, as it looks in the "
            f"image; answer \"{tax.not_visible}\" when the attribute cannot be seen or does not apply.\n"
            + "\n".join(lines))


def reannotate_prompt(tax: Taxonomy, category: str, rejected: dict[str, str], boxed: bool) -> str:
    lines = [_values_line(tax, category, a, exclude=v) for a, v in rejected.items()]
    wrong = "; ".join(f"{a}: {v}" for a, v in rejected.items())
    subject = f"the {category} in this crop" if boxed else f"the {category} in this image"
    return (f"A reviewer found these labels of {subject} wrong: {wrong}. Look again and choose the correct value "
            f"for each attribute, or \"{tax.not_visible}\" if it cannot be seen.\n" + "\n".join(lines))


def restricted_schema(tax: Taxonomy, category: str, rejected: dict[str, str]) -> dict[str, Any]:
    """Schema of a re-annotation: only the rejected attributes, each without its rejected value."""
    props = {a: {"type": "string", "enum": [*(x for x in tax.allowed(category, a) if x != v), tax.not_visible]}
             for a, v in rejected.items()}
    return {"title": f"lookbench_{category}_reannotate_v{tax.version}", "type": "object", "properties": props,
            "required": list(rejected), "additionalProperties": False}


def judge_prompt(tax: Taxonomy, category: str, labels: dict[str, str], boxed: bool) -> str:
    lines = []
    for a, v in labels.items():
        desc = tax.descriptions.get(a)
        lines.append(f"- {a}{f' ({desc})' if desc else ''}: {v}")
    subject = f"the {category} in this crop" if boxed else f"the {category} in this image"
    return (f"You check another annotator's labels of {subject}. For each attribute answer \"{ACCEPT}\" if the "
            f"value is correct for the {category} as it looks in the image, \"{REJECT}\" if it is wrong or cannot "
            f"be seen.\n" + "\n".join(lines))


def judge_schema(tax: Taxonomy, category: str, attributes: Iterable[str]) -> dict[str, Any]:
    """Schema of a judge's answer: ``{attribute: "accept" | "reject"}`` for each attribute judged."""
    attrs = list(attributes)
    return {"title": f"lookbench_{category}_judge_v{tax.version}", "type": "object",
            "properties": {a: {"type": "string", "enum": [ACCEPT, REJECT]} for a in attrs},
            "required": attrs, "additionalProperties": False}


def _messages(image_url: str, text: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                         {"type": "text", "text": text}]}]


def _schema_name(schema: dict) -> str:
    """A response_format name (``^[a-zA-Z0-9_-]{1,64}$``) from the schema title."""
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in schema["title"])[:64]
