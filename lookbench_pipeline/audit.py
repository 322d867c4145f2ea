"""Human audit of a release's attribute labels: a stratified sample for review, a static form that records
verdicts, and the estimated label precision with a confidence interval.

1. :func:`sample_release` draws up to ``per_stratum`` labels per stratum (category, attribute) from a published
   release (every file read through its manifest's sha256), one per item: each item's labels are those of its
   annotator, shown on the item's gallery image (the catalogue packshot the image model labelled), else a query
   image.
2. :func:`export` writes ``audit.csv`` (one row per label, an empty ``verdict`` column), the images, and
   ``index.html``: a page that shows each image with its label and records ``correct`` / ``incorrect`` /
   ``unsure`` per row (kept in the browser's local storage), and downloads the filled CSV. A reviewer can as well
   fill the ``verdict`` column of ``audit.csv`` in a spreadsheet.
3. :func:`score` reads the filled CSV: precision per stratum, per attribute, per category and overall, each a
   stratified estimate (strata weighted by their size in the release, ``stratum_size``) with a 95% Wilson score
   interval at the design's effective sample size (see :func:`stratified_precision`). ``unsure`` and empty
   verdicts are not counted.
"""

from __future__ import annotations

import csv
import html
import json
import math
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .releases.reader import (SUBSETS, ReleaseIntegrityError, check_scored_schema, check_scored_table, read_file,
                              read_manifest)
from .store import ObjectStore

VERDICTS = ("correct", "incorrect", "unsure")
COLUMNS = ["audit_id", "release", "category", "attribute", "value", "item_ID", "image", "image_sha256", "annotator",
           "stratum_size", "verdict", "note"]


@dataclass(frozen=True)
class AuditRow:
    audit_id: str
    release: str
    category: str
    attribute: str
    value: str
    item_ID: str
    image_sha256: str
    annotator: str
    stratum_size: int


def wilson_interval(successes: float, n: float, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927, "Probable inference, the law of succession,
    and statistical inference", JASA 22:209; recommended over the Wald interval by Agresti & Coull 1998):
    ``(p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``p = successes / n``; ``z`` defaults to the
    97.5% normal quantile (a 95% interval). ``n`` may be fractional (an effective sample size).

    Raises:
        ValueError: ``n`` not positive or ``successes`` outside ``[0, n]``.
    """
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes}/{n}")
    p = successes / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def stratified_precision(strata: dict[Any, tuple[int, int, int]]) -> dict[str, Any] | None:
    """Precision from a stratified sample: ``strata[h] = (N_h, n_h, correct_h)`` (stratum size, labels reviewed,
    labels found correct). Only strata with a review count.

    Estimate ``p = Σ W_h p_h`` with ``W_h = N_h / Σ N``; variance ``Σ W_h² (1 - n_h/N_h) p_h (1 - p_h) / (n_h - 1)``
    (the stratified-sampling estimator with the finite-population correction, Cochran, "Sampling Techniques",
    3rd ed., eq. 5.7 with the unbiased stratum variance); the interval is Wilson's at Kish's effective sample size
    ``n_eff = p (1 - p) / var`` (the approach of Korn & Graubard 1998, "Confidence intervals for proportions with
    small expected number of positive counts estimated from survey data", Survey Methodology 24:193), and at the
    plain ``Σ n_h`` when the variance is 0 (every reviewed stratum all correct, all incorrect, or censused).

    Returns ``{"precision", "ci_low", "ci_high", "reviewed", "strata"}`` or None when nothing was reviewed.
    """
    rev = {h: v for h, v in strata.items() if v[1] > 0}
    if not rev:
        return None
    total = sum(N for N, _, _ in rev.values())
    p = var = 0.0
    n_sum = 0
    for N, n, c in rev.values():
        w = N / total
        ph = c / n
        p += w * ph
        if n > 1:
            var += w * w * max(0.0, 1 - n / N) * ph * (1 - ph) * n / (n - 1) / n
        n_sum += n
    n_eff = p * (1 - p) / var if var > 0 else n_sum
    n_eff = max(1.0, min(n_eff, float(total)))
    lo, hi = wilson_interval(p * n_eff, n_eff)
    return {"precision": p, "ci_low": lo, "ci_high": hi, "reviewed": n_sum, "strata": len(rev)}


def sample_release(store: ObjectStore, version: str, per_stratum: int = 20, seed: int = 0
                   ) -> tuple[list[AuditRow], dict[str, bytes]]:
    """Draw the audit sample of a published release: up to ``per_stratum`` labels per (category, attribute),
    uniformly without replacement, one label per item and attribute. Returns the rows (sorted by category,
    attribute, item) and the JPEG bytes of their images by sha256.

    Raises:
        StoreError: the release is not published. ReleaseIntegrityError: a file does not match its manifest, or
        its table is not the published schema (``releases.reader.check_scored_table``, as ``evaluate`` checks it:
        a mirror may rewrite a manifest to match), or an exported image is missing or cannot be decoded (the
        error names the file, the row and its ``sample_id``).
    """
    manifest = read_manifest(store, version)
    items: dict[str, dict] = {}
    images: dict[str, bytes] = {}
    where: dict[str, str] = {}  # image_sha256 -> "<file>: column image: row i (sample_id …)"
    for subset in SUBSETS:
        for role in ("gallery", "query"):  # gallery first: an item's packshot is the image it is shown on
            if f"{subset}/{role}.parquet" not in manifest["files"]:
                continue
            name = f"{version}/{subset}/{role}.parquet"
            table = read_file(store, version, subset, role)
            check_scored_schema(table.schema, name)
            check_scored_table(table, name)
            for i, r in enumerate(table.to_pylist()):
                if r["item_ID"] in items or not r["category"]:
                    continue
                row = f"{name}: column image: row {i} (sample_id {r['sample_id']!r})"
                data = (r["image"] or {}).get("bytes")
                if not data:
                    raise ReleaseIntegrityError(f"{row} has no image bytes")
                items[r["item_ID"]] = r
                images[r["image_sha256"]] = data
                where[r["image_sha256"]] = row
    strata: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for item_id, r in items.items():
        for a in r["attributes"] or []:
            strata[(r["category"], a["name"])].append((item_id, a["value"]))
    rng = random.Random(seed)
    rows: list[AuditRow] = []
    for (cat, attr), members in sorted(strata.items()):
        members.sort()
        picked = rng.sample(members, min(per_stratum, len(members)))
        for item_id, value in sorted(picked):
            r = items[item_id]
            rows.append(AuditRow(audit_id=f"{cat}/{attr}/{item_id}", release=version, category=cat, attribute=attr,
                                 value=value, item_ID=item_id, image_sha256=r["image_sha256"],
                                 annotator=r.get("annotator") or "", stratum_size=len(members)))
    used = {r.image_sha256 for r in rows}
    for sha in sorted(used):  # the reviewer must see the picture: every exported one decodes
        _check_decodes(images[sha], where[sha])
    return rows, {k: v for k, v in images.items() if k in used}


def _check_decodes(data: bytes, row: str) -> None:
    """Raise ReleaseIntegrityError naming ``row`` when ``data`` is not an image PIL can decode."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except (OSError, ValueError, SyntaxError, TypeError, Image.DecompressionBombError) as exc:
        raise ReleaseIntegrityError(f"{row} cannot be decoded as an image ({type(exc).__name__})") from None


def export(rows: list[AuditRow], images: dict[str, bytes], out: str | Path) -> Path:
    """Write ``audit.csv``, ``images/<sha256>.jpg`` and ``index.html`` into ``out``; returns the CSV's path."""
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    for sha, data in images.items():
        (out / "images" / f"{sha}.jpg").write_bytes(data)
    path = out / "audit.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({**r.__dict__, "image": f"images/{r.image_sha256}.jpg", "verdict": "", "note": ""})
    (out / "index.html").write_text(_form(rows), encoding="utf-8")
    return path


def _form(rows: list[AuditRow]) -> str:
    data = json.dumps([{**r.__dict__, "image": f"images/{r.image_sha256}.jpg"} for r in rows])
    title = html.escape(f"LookBench label audit {rows[0].release}" if rows else "LookBench label audit")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body{{font-family:sans-serif;margin:1em}} .row{{display:flex;gap:1em;align-items:center;border-bottom:1px solid #ddd;
padding:.5em 0}} img{{max-width:180px;max-height:180px}} .label{{min-width:22em}} .done{{background:#f3fff3}}
header{{position:sticky;top:0;background:#fff;padding:.5em 0;border-bottom:2px solid #444}}
</style></head><body>
<header><h1>{title}</h1>
<p>For each image: is the label right for the item named by the category? <b>correct</b>, <b>incorrect</b>, or
<b>unsure</b> (not counted). Verdicts are kept in this browser; <button id="dl">Download verdicts CSV</button> and run
<code>lookbench audit score verdicts.csv</code>. <span id="progress"></span></p></header>
<div id="rows"></div>
<script>
const ROWS = {data};
const COLS = {json.dumps(COLUMNS)};
const KEY = "lookbench-audit:" + (ROWS.length ? ROWS[0].release : "");
const saved = JSON.parse(localStorage.getItem(KEY) || "{{}}");
function progress() {{
  const n = ROWS.filter(r => (saved[r.audit_id] || {{}}).verdict).length;
  document.getElementById("progress").textContent = n + " / " + ROWS.length + " reviewed";
}}
const box = document.getElementById("rows");
ROWS.forEach((r, i) => {{
  const d = document.createElement("div");
  d.className = "row";
  const s = saved[r.audit_id] || {{}};
  const opts = {json.dumps(list(VERDICTS))}.map(v =>
    `<label><input type="radio" name="v${{i}}" value="${{v}}" ${{s.verdict === v ? "checked" : ""}}> ${{v}}</label>`).join(" ");
  d.innerHTML = `<img src="${{r.image}}" alt="">` +
    `<div class="label"><b>${{r.category}}</b> &middot; ${{r.attribute}}: <b>${{r.value}}</b><br>` +
    `<small>${{r.item_ID}} &middot; ${{r.annotator}}</small></div><div>${{opts}}<br>` +
    `<input type="text" placeholder="note" size="30" value="${{(s.note || "").replace(/"/g, "&quot;")}}"></div>`;
  if (s.verdict) d.classList.add("done");
  d.querySelectorAll("input[type=radio]").forEach(el => el.addEventListener("change", () => {{
    saved[r.audit_id] = {{...(saved[r.audit_id] || {{}}), verdict: el.value}};
    localStorage.setItem(KEY, JSON.stringify(saved)); d.classList.add("done"); progress();
  }}));
  d.querySelector("input[type=text]").addEventListener("input", e => {{
    saved[r.audit_id] = {{...(saved[r.audit_id] || {{}}), note: e.target.value}};
    localStorage.setItem(KEY, JSON.stringify(saved));
  }});
  box.appendChild(d);
}});
progress();
function cell(v) {{ v = String(v ?? ""); return /[",\\n]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v; }}
document.getElementById("dl").addEventListener("click", () => {{
  const lines = [COLS.join(",")].concat(ROWS.map(r => COLS.map(c =>
    cell(c === "verdict" || c === "note" ? (saved[r.audit_id] || {{}})[c] : r[c])).join(",")));
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([lines.join("\\n") + "\\n"], {{type: "text/csv"}}));
  a.download = "verdicts.csv"; a.click();
}});
</script></body></html>
"""


def score(path: str | Path) -> dict[str, Any]:
    """Estimated label precision from a filled audit CSV (see the module docstring).

    Returns ``{"overall": {...}, "by_attribute": {attr: {...}}, "by_category": {cat: {...}},
    "by_stratum": {"cat/attr": {...}}, "reviewed", "unsure", "pending"}`` where each ``{...}`` is
    :func:`stratified_precision`'s result (None when nothing in it was reviewed).

    Raises:
        ValueError: a verdict other than correct / incorrect / unsure / empty, or a missing column.
    """
    strata: dict[tuple[str, str], list[int]] = {}
    reviewed = unsure = pending = 0
    with Path(path).open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"category", "attribute", "stratum_size", "verdict"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}")
        for i, r in enumerate(reader, start=2):
            v = (r["verdict"] or "").strip().lower()
            if v not in ("", *VERDICTS):
                raise ValueError(f"{path} line {i}: verdict {r['verdict']!r} is not one of {VERDICTS} or empty")
            key = (r["category"], r["attribute"])
            s = strata.setdefault(key, [int(r["stratum_size"]), 0, 0])
            if v == "":
                pending += 1
            elif v == "unsure":
                unsure += 1
            else:
                reviewed += 1
                s[1] += 1
                s[2] += v == "correct"

    def over(keys: list[tuple[str, str]]) -> dict[str, Any] | None:
        return stratified_precision({k: tuple(strata[k]) for k in keys})

    return {
        "overall": over(list(strata)),
        "by_attribute": {a: over([k for k in strata if k[1] == a]) for a in sorted({k[1] for k in strata})},
        "by_category": {c: over([k for k in strata if k[0] == c]) for c in sorted({k[0] for k in strata})},
        "by_stratum": {f"{c}/{a}": over([(c, a)]) for c, a in sorted(strata)},
        "reviewed": reviewed, "unsure": unsure, "pending": pending,
    }


def format_score(result: dict[str, Any]) -> str:
    """A plain-text table of :func:`score`'s result."""
    def line(name: str, s: dict[str, Any] | None) -> str:
        if s is None:
            return f"  {name:32s} not reviewed"
        return (f"  {name:32s} {100 * s['precision']:6.1f}%  [{100 * s['ci_low']:5.1f}, {100 * s['ci_high']:5.1f}]"
                f"  n={s['reviewed']}")

    out = [f"labels reviewed {result['reviewed']}, unsure {result['unsure']}, pending {result['pending']}",
           "estimated precision (stratified; 95% Wilson interval at the effective sample size)",
           line("overall", result["overall"]), "by attribute:"]
    out += [line(a, s) for a, s in result["by_attribute"].items()]
    out.append("by category:")
    out += [line(c, s) for c, s in result["by_category"].items()]
    return "\n".join(out)
