"""Counts of a labelling run (:func:`summarize`) and the judge's acceptance rates (:func:`acceptance_rates`),
with the release gate on them (:func:`acceptance_check`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .prompts import ACCEPT

if TYPE_CHECKING:
    from .annotator import VlmLabel


def acceptance_rates(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The judge's acceptance rates over first-round verdicts (what the annotator got right), from annotation
    rows (``schemas.ANNOTATIONS`` dicts or :meth:`VlmLabel.row`).

    Returns ``{"judged", "accepted", "overall" (None when nothing was judged), "by_attribute": {attr: rate},
    "by_category": {category: rate}, "reannotated", "reannotated_accepted"}``.
    """
    judged = accepted = re_n = re_ok = 0
    by_attr: Counter[str] = Counter()
    by_attr_ok: Counter[str] = Counter()
    by_cat: Counter[str] = Counter()
    by_cat_ok: Counter[str] = Counter()
    for r in rows:
        for v in r.get("judge_verdicts") or []:
            ok = v["verdict"] == ACCEPT
            if v.get("round", 1) != 1:
                re_n += 1
                re_ok += ok
                continue
            judged += 1
            accepted += ok
            by_attr[v["name"]] += 1
            by_attr_ok[v["name"]] += ok
            by_cat[r["category"]] += 1
            by_cat_ok[r["category"]] += ok
    return {
        "judged": judged, "accepted": accepted, "overall": accepted / judged if judged else None,
        "by_attribute": {a: by_attr_ok[a] / n for a, n in sorted(by_attr.items())},
        "by_category": {c: by_cat_ok[c] / n for c, n in sorted(by_cat.items())},
        "reannotated": re_n, "reannotated_accepted": re_ok,
    }


def acceptance_check(rates: dict[str, Any] | None, min_acceptance: float) -> tuple[bool, dict[str, Any]]:
    """Whether a release's labels pass the judge: the overall acceptance rate is at least ``min_acceptance``.

    Passes (with the reason in the details) when no judge ran (``rates`` None) or nothing was judged.
    """
    if rates is None:
        return True, {"judge": "not configured (catalogue-text labels or no judge)", "min_acceptance": min_acceptance}
    if rates["overall"] is None:
        return True, {"judge": "nothing judged", "judged": 0, "min_acceptance": min_acceptance}
    passed = rates["overall"] >= min_acceptance
    return passed, {"acceptance_rate": round(rates["overall"], 4), "min_acceptance": min_acceptance,
                    "judged": rates["judged"], "accepted": rates["accepted"],
                    "by_attribute": {k: round(v, 4) for k, v in rates["by_attribute"].items()},
                    "by_category": {k: round(v, 4) for k, v in rates["by_category"].items()}}


def summarize(labels: Sequence[VlmLabel], started: float | None = None) -> dict[str, Any]:
    """Counts of a labelling run; ``items = labelled + rejected + failed``."""
    c: dict[str, Any] = {"items": len(labels), "labelled": 0, "rejected": 0, "failed": 0}
    reasons: Counter[str] = Counter()
    for lb in labels:
        c[lb.status] += 1
        if lb.reason:
            reasons[f"{lb.status}.{lb.reason}"] += 1
    c["reasons"] = dict(sorted(reasons.items()))
    c["requests"] = sum(lb.requests for lb in labels)
    c["cache_hits"] = sum(lb.cached for lb in labels)
    if started is not None:
        c["seconds"] = round(time.monotonic() - started, 3)
    assert c["items"] == c["labelled"] + c["rejected"] + c["failed"]
    return c
