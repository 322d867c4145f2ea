"""The leaderboard and the static HTML report of an evaluation (lookbench_pipeline.evaluate.Evaluation).

Files written into one folder (and, when a store is given, under ``reports/<name>/`` in the object store):

* ``leaderboard.parquet``: one row per (subset, model), one column per metric (``schemas.leaderboard_schema``);
* ``scores.parquet``: the long ``scores`` table with bootstrap intervals;
* ``leaderboard.md``: the same tables in Markdown, with the legacy-versus-live gap, the scored models (what each
  is -- e.g. "ImageNet features, not a fashion model" -- and its licence) and the skipped models;
* ``index.html``: one self-contained page (no script, no network: plots and images are ``data:`` URIs, and a
  Content-Security-Policy forbids anything else): tables per subset, Recall@K curves (matplotlib, PNG), the
  legacy-versus-live gap, paired bootstrap tests, the models (what each is, its licence, weights checksum), and
  for sampled queries the query image with each model's top-5 marked hit (same item), fine (same category and
  attributes), category (same category) or miss;
* ``evaluation.json``: counts (contamination exclusions, cutoffs), models with their ``info()``, skipped models,
  paired tests.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import schemas
from .evaluate import Evaluation
from .releases.reader import SUBSETS
from .scoring import site_benchmark
from .store import ObjectStore

FAMILIES = (("coarse_recall", "Coarse Recall"), ("fine_recall", "Fine Recall"), ("item_recall", "Exact-item Recall"),
            ("ndcg", "nDCG"))
EXTRA = ("distractor@1", "soft_negative@1")  # with a noise gallery (lower is better)
PRIMARY = "fine_recall@1"  # the LookBench paper's headline metric
LEGACY_PRIMARY = "item_recall@1"


def report_name(ev: Evaluation) -> str:
    """``<version>`` or ``<version>-cutoff-<date|model>``: the folder name of a report."""
    return ev.release + (f"-cutoff-{ev.cutoff}" if ev.cutoff else "")


def metric_columns(ev: Evaluation) -> list[str]:
    present = set(ev.scores["metric"].to_pylist())
    return [f"{fam}@{k}" for fam, _ in FAMILIES for k in ev.ks if f"{fam}@{k}" in present] + \
        [m for m in EXTRA if m in present]


def _subset_order(subset: str) -> tuple[int, str]:
    order = {s: i for i, s in enumerate([*SUBSETS, "overall"])}
    return order.get(subset, 99), subset


def leaderboard_table(ev: Evaluation) -> pa.Table:
    """One row per (subset, model), ranked within each subset by fine_recall@1 (then coarse_recall@1, then
    model id); legacy benchmarks by item_recall@1."""
    metrics = metric_columns(ev)
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for r in ev.scores.to_pylist():
        row = cells.setdefault((r["subset"], r["model"]), {"release": r["release"], "subset": r["subset"],
                                                          "model": r["model"], "n_queries": r["n_queries"],
                                                          "cutoff": r["cutoff"]})
        row[r["metric"]] = r["value"]
    rows = []
    for subset in sorted({s for s, _ in cells}, key=_subset_order):
        key = LEGACY_PRIMARY if subset.startswith("legacy:") else PRIMARY
        ranked = sorted((cells[k] for k in cells if k[0] == subset),
                        key=lambda r: (-(r.get(key) or 0.0), -(r.get("coarse_recall@1") or 0.0), r["model"]))
        for n, r in enumerate(ranked, 1):
            rows.append({**r, "rank": n})
    return schemas.from_rows(rows, schemas.leaderboard_schema(metrics))


def gap_rows(ev: Evaluation) -> list[dict]:
    """Each model's exact-item Recall@K on each legacy benchmark beside its live (overall) value, and the gap
    ``legacy - live`` in percentage points, for K = 1 and the largest K."""
    val = {(r["model"], r["subset"], r["metric"]): r["value"] for r in ev.scores.to_pylist()}
    legacy = sorted({s for _, s, _ in val if s.startswith("legacy:")})
    out = []
    for model in sorted({m for m, _, _ in val}):
        for src in legacy:
            for k in sorted({1, max(ev.ks)}):
                m = f"item_recall@{k}"
                if (model, src, m) in val and (model, "overall", m) in val:
                    a, b = val[(model, src, m)], val[(model, "overall", m)]
                    out.append({"model": model, "legacy": src.removeprefix("legacy:"), "metric": m,
                                "legacy_value": a, "live_value": b, "gap_pp": 100 * (a - b)})
    return out


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _ci(r: dict) -> str:
    if r.get("ci_low") is None:
        return ""
    return f" [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]"


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _summary_metrics(ev: Evaluation) -> list[str]:
    cols = metric_columns(ev)
    want = [f"{fam}@{k}" for fam, _ in FAMILIES for k in (1, 10) if fam != "ndcg"] + ["ndcg@5", *EXTRA]
    return [m for m in want if m in cols] or cols


def _subset_tables(ev: Evaluation, metrics: list[str]) -> list[tuple[str, list[str], list[list[str]]]]:
    lb = leaderboard_table(ev).to_pylist()
    ci = {(r["model"], r["subset"], r["metric"]): r for r in ev.scores.to_pylist()}
    out = []
    for subset in sorted({r["subset"] for r in lb}, key=_subset_order):
        rows = [r for r in lb if r["subset"] == subset]
        cols = [m for m in metrics if any(r.get(m) is not None for r in rows)]
        body = []
        for r in rows:
            cells = [str(r["rank"]), r["model"], str(r["n_queries"]), r["cutoff"] or "-"]
            for m in cols:
                c = ci.get((r["model"], subset, m))
                cells.append(_pct(r.get(m)) + (_ci(c) if c and m in (PRIMARY, LEGACY_PRIMARY) else ""))
            body.append(cells)
        out.append((subset, ["rank", "model", "queries", "cutoff", *cols], body))
    return out


def leaderboard_markdown(ev: Evaluation) -> str:
    """The leaderboard in Markdown: per subset and overall (values in percent, the ranking metric with its 95%
    bootstrap interval), the legacy-versus-live gap, the skipped models and the contamination counts."""
    metrics = _summary_metrics(ev)
    parts = [f"# LookBench leaderboard — release {ev.release}", "",
             f"Cutoff: {ev.cutoff or 'none (every query)'}. Values in percent; ranked by {PRIMARY} "
             f"({LEGACY_PRIMARY} on legacy benchmarks), 95% bootstrap interval in brackets. "
             "Definitions: docs/METRICS.md.", ""]
    parts += _contamination_lines(ev) + [""]
    for subset, head, body in _subset_tables(ev, metrics):
        parts += [f"## {subset}", "", _md_table(head, body), ""]
    gaps = gap_rows(ev)
    if gaps:
        parts += ["## Legacy against live (exact-item Recall)", "",
                  _md_table(["model", "legacy benchmark", "metric", "legacy", "live (overall)", "gap (pp)"],
                            [[g["model"], g["legacy"], g["metric"], _pct(g["legacy_value"]), _pct(g["live_value"]),
                              f"{g['gap_pp']:+.1f}"] for g in gaps]), ""]
    if ev.models:
        parts += ["## Models", "", _md_table(["model", "what it is", "licence"], _model_rows(ev)), ""]
    if ev.skipped:
        parts += ["## Models not scored on this machine", "",
                  _md_table(["model", "reason"], [[s["model"], s["reason"]] for s in ev.skipped]), ""]
    return "\n".join(parts).rstrip() + "\n"


def _model_rows(ev: Evaluation) -> list[list[str]]:
    """Per scored model: its id, what it is (the registry's description) and the licence of its weights."""
    return [[m["model"], m.get("description") or "-", m.get("license") or "-"] for m in ev.models]


def _contamination_lines(ev: Evaluation) -> list[str]:
    rel = ev.counts.get("release_rejected_contamination") or {}
    lines = [f"Queries kept out at release time as contamination: {sum(rel.values())}"
             + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(rel.items()))})" if rel else "") + "."]
    subs = {s: c for s, c in ev.counts.items() if isinstance(c, dict) and "queries_in_release" in c}
    excl = sum(c["excluded_contamination"] for c in subs.values())
    total = sum(c["queries_in_release"] for c in subs.values())
    lines.append(f"Queries in the release: {total}; excluded at evaluation as contamination (current index): {excl}.")
    for m in ev.models:
        if m["cutoff"]:
            lines.append(f"{m['model']}: queries first seen on or after {m['cutoff']} ({m['cutoff_source']} cutoff).")
    return lines


# ---------------------------------------------------------------------------------------------------------------
# Plots and HTML


def recall_plots(ev: Evaluation) -> dict[str, bytes]:
    """One PNG per subset (and overall): Recall@K curves (Coarse, Fine, exact-item) and nDCG@K against K, one
    line per model; on ``overall`` the legacy benchmarks' exact-item curves are dashed (the gap). A character the
    font lacks (an emoji in a model's name) is drawn as a box, without matplotlib's warning on stderr (that one
    warning only, and only here)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        return _recall_plots(ev)


def _recall_plots(ev: Evaluation) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    data: dict[tuple[str, str, str], dict[int, float]] = {}
    for r in ev.scores.to_pylist():
        fam, _, k = r["metric"].partition("@")
        data.setdefault((r["subset"], r["model"], fam), {})[int(k)] = r["value"]
    models = sorted({m for _, m, _ in data})
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(models)}
    out = {}
    for subset in sorted({s for s, _, _ in data if not s.startswith("legacy:")}, key=_subset_order):
        fams = [(f, t) for f, t in FAMILIES if any((subset, m, f) in data for m in models)]
        fig, axes = plt.subplots(1, len(fams), figsize=(3.2 * len(fams), 3.0), squeeze=False)
        for ax, (fam, title) in zip(axes[0], fams):
            for m in models:
                pts = data.get((subset, m, fam))
                if pts:
                    ks = sorted(pts)
                    ax.plot(ks, [100 * pts[k] for k in ks], marker="o", color=colors[m], label=m)
                if subset == "overall" and fam == "item_recall":
                    for n, src in enumerate(sorted({s for s, mm, f in data if s.startswith("legacy:") and mm == m})):
                        lp = data.get((src, m, fam))
                        if lp:
                            ks = sorted(lp)
                            ax.plot(ks, [100 * lp[k] for k in ks], linestyle="--", marker="x", color=colors[m],
                                    alpha=0.8 - 0.2 * (n % 3), label=f"{m} on {src.removeprefix('legacy:')}")
            ax.set_title(f"{title}@K", fontsize=10)
            ax.set_xlabel("K")
            ax.set_xticks(ev.ks)
            ax.set_ylim(0, 100)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("percent")
        handles, labels = [], []
        for ax in axes[0]:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
        fig.suptitle(subset, fontsize=11)
        fig.tight_layout(rect=(0, 0.08 + 0.05 * ((len(labels) - 1) // 3), 1, 0.95))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
        plt.close(fig)
        out[subset] = buf.getvalue()
    return out


def _data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
p{max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
.tw{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:8px 0 16px;font-size:12px}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f4f4f4;white-space:normal;vertical-align:bottom;min-width:3.5em}
td.l{text-align:left;white-space:normal;overflow-wrap:anywhere;min-width:6em;max-width:16em}
th.l{text-align:left}.muted{color:#777;font-size:12px}
.ex{display:flex;gap:16px;align-items:flex-start;margin:10px 0;padding:8px;border:1px solid #eee;flex-wrap:wrap}
.q{width:170px;flex:none}.runs{display:flex;flex-direction:column;gap:6px}
.run{display:flex;gap:6px;align-items:center;flex-wrap:wrap}.run .name{width:200px;font-size:12px;word-break:break-all}
figure{margin:0;text-align:center;font-size:11px;width:132px}
figure img{width:120px;height:120px;object-fit:contain;border:4px solid #bbb;background:#fafafa}
.q figure{width:170px}.q figure img{width:160px;height:160px;border-color:#333}
figure.hit img{border-color:#1a9850}figure.fine img{border-color:#4393c3}figure.category img{border-color:#f08a24}
figure.miss img{border-color:#d73027}
.badge{display:inline-block;padding:0 4px;border-radius:3px;color:#fff;font-size:10px}
.b-hit{background:#1a9850}.b-fine{background:#4393c3}.b-category{background:#f08a24}.b-miss{background:#d73027}
img.plot{max-width:100%;height:auto;border:0}
"""
"""The report's style. Tables: values and intervals never wrap (``white-space: nowrap``), header names break after
``_`` / ``@`` (``<wbr>``), model names wrap inside their cell, and each table sits in a wrapper that scrolls
sideways only if a table still cannot fit (the page itself never does; checked at 1280 and 1920 px by
``tests/test_evaluate_report.py``)."""


def _html_table(head: list[str], rows: list[list[str]], left: int = 2) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{_breakable(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{html.escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<div class='tw'><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>"


def _breakable(name: str) -> str:
    """A column name, HTML-escaped, that may break after ``_`` and ``@`` (``coarse_<wbr>recall@<wbr>10``)."""
    return html.escape(name).replace("_", "_<wbr>").replace("@", "@<wbr>")


def _figure(uri: str, caption: str, cls: str, alt: str) -> str:
    return (f'<figure class="{cls}"><img src="{uri}" alt="{html.escape(alt)}" width="120" height="120">'
            f"<figcaption>{caption}</figcaption></figure>")


def render_html(ev: Evaluation, plots: dict[str, bytes] | None = None) -> str:
    """The report page (see the module docstring). All text from the release (categories, attributes, ids) is
    HTML-escaped."""
    no_plots = ""
    if plots is None:
        try:
            plots = recall_plots(ev)
        except ImportError:  # the consumer install has no matplotlib: the report without its curves, saying so
            plots, no_plots = {}, "Recall@K curves need matplotlib: pip install 'lookbench-pipeline[report]'."
    e = html.escape
    metrics = _summary_metrics(ev)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
        "style-src 'unsafe-inline'\">",
        f"<title>LookBench {e(ev.release)} — evaluation report</title><style>{_CSS}</style></head><body>",
        f"<h1>LookBench release {e(ev.release)}: evaluation report</h1>",
        "<p>" + "<br>".join(e(x) for x in [
            f"Cutoff: {ev.cutoff or 'none (every query)'}. Values in percent; ranked by {PRIMARY} "
            f"({LEGACY_PRIMARY} on legacy benchmarks) with its 95% bootstrap interval.",
            *_contamination_lines(ev)]) + "</p>",
        "<p class='muted'>Coarse: a top-K item has the query's category. Fine: same category and every attribute "
        "both carry agrees ('not visible' is not carried). Exact-item: the query's item_ID. nDCG: graded gain from "
        "attribute overlap (docs/METRICS.md).</p>",
    ]
    parts.append("<h2 id='leaderboard'>Leaderboard</h2>")
    for subset, head, body in _subset_tables(ev, metrics):
        parts.append(f"<h3 id='t-{e(subset)}'>{e(subset)}</h3>" + _html_table(head, body))
    if no_plots:
        parts.append(f"<p class='muted'>{e(no_plots)}</p>")
    if plots:
        parts.append("<h2 id='curves'>Recall@K curves</h2>")
        for subset, png in plots.items():
            parts.append(f"<p><img class='plot' src='{_data_uri(png, 'image/png')}' "
                         f"alt='Recall@K curves, {e(subset)}'></p>")
    gaps = gap_rows(ev)
    if gaps:
        parts.append("<h2 id='gap'>Legacy against live</h2><p class='muted'>The same model's exact-item Recall on "
                     "a legacy benchmark (read from its own format) and on this live release; the gap is the "
                     "difference in percentage points.</p>")
        parts.append(_html_table(["model", "legacy benchmark", "metric", "legacy", "live (overall)", "gap (pp)"],
                                 [[g["model"], g["legacy"], g["metric"], _pct(g["legacy_value"]),
                                   _pct(g["live_value"]), f"{g['gap_pp']:+.1f}"] for g in gaps], left=3))
    if ev.legacy_counts:
        parts.append(_html_table(["legacy benchmark", "queries scored", "gallery", "unreadable", "no positive"],
                                 [[k, v["queries"], v["gallery"], v["unreadable"], v["no_positive"]]
                                  for k, v in sorted(ev.legacy_counts.items())], left=1))
    if ev.paired:
        parts.append("<h2 id='paired'>Paired bootstrap tests</h2><p class='muted'>The best model against each "
                     "other one on the queries both scored (2,000 resamples; two-sided p).</p>")
        parts.append(_html_table(["metric", "model A", "model B", "queries", "A − B (pp)", "95% interval", "p"],
                                 [[p["metric"], p["model_a"], p["model_b"], p["n_queries"], f"{100 * p['diff']:+.1f}",
                                   f"[{100 * p['ci_low']:+.1f}, {100 * p['ci_high']:+.1f}]", f"{p['p_value']:.3f}"]
                                  for p in ev.paired], left=3))
    if ev.skipped:
        parts.append("<h2 id='skipped'>Models not scored on this machine</h2>")
        parts.append(_html_table(["model", "reason"], [[s["model"], s["reason"]] for s in ev.skipped]))
    if ev.models:
        parts.append("<h2 id='models'>Models</h2>")
        parts.append(_html_table(["model", "what it is", "licence"], _model_rows(ev), left=3))
        parts.append(_html_table(["model", "backend", "revision", "input size", "dim", "weights sha256", "cutoff"],
                                 [[m["model"], m["info"].get("backend") or "", m["info"].get("revision") or "",
                                   m["info"].get("input_size") or "", m["info"].get("dim") or "",
                                   (m["info"].get("weights_sha256") or "-")[:16], m["cutoff"] or "-"]
                                  for m in ev.models], left=3))
    parts.append(_examples_html(ev))
    parts.append("</body></html>")
    return "\n".join(parts)


def _examples_html(ev: Evaluation) -> str:
    if not ev.examples:
        return ""
    e = html.escape
    parts = ["<h2 id='examples'>Sampled queries and each model's top-5</h2>",
             "<p class='muted'>Border: <span class='badge b-hit'>hit</span> the query's item (exact-item hit); "
             "<span class='badge b-fine'>fine</span> another item with the same category and agreeing attributes "
             "(a Fine hit); <span class='badge b-category'>category</span> same category only (a Coarse hit); "
             "<span class='badge b-miss'>miss</span> another category. Queries are a seeded sample, the same for "
             "every model.</p>"]
    by_query: dict[tuple[str, str], list[dict]] = {}
    for x in ev.examples:
        by_query.setdefault((x["subset"], x["query"]), []).append(x)
    for subset in sorted({s for s, _ in by_query}, key=_subset_order):
        parts.append(f"<h3>{e(subset)}</h3>")
        for (s, qkey), runs in by_query.items():
            if s != subset:
                continue
            x = runs[0]
            attrs = ", ".join(f"{k}: {v}" for k, v in sorted(x["attributes"].items()))
            q = _figure(_data_uri(ev.thumbs[qkey], "image/jpeg"),
                        f"<b>query</b> {e(x['category'])}<br><span class='muted'>{e(attrs)}</span>", "query",
                        f"query {x['sample_id']}")
            rows = []
            for run in runs:
                figs = []
                for res in run["results"]:
                    cls = ("hit" if res["item_hit"] else "fine" if res["fine_hit"] else
                           "category" if res["coarse_hit"] else "miss")
                    noise = " <span class='muted'>(noise)</span>" if res.get("noise") else ""
                    figs.append(_figure(_data_uri(ev.thumbs[res["thumb"]], "image/jpeg"),
                                        f"#{res['rank']} <span class='badge b-{cls}'>{cls}</span> "
                                        f"{e(res['category'])}{noise}<br><span class='muted'>{res['score']:.3f}</span>",
                                        cls, f"rank {res['rank']} {cls}"))
                rows.append(f"<div class='run'><div class='name'>{e(run['model'])}</div>{''.join(figs)}</div>")
            parts.append(f"<div class='ex'><div class='q'>{q}</div><div class='runs'>{''.join(rows)}</div></div>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# Writing


def evaluation_json(ev: Evaluation) -> dict:
    return {"release": ev.release, "manifest_sha256": ev.manifest_sha256, "cutoff": ev.cutoff, "ks": ev.ks, "counts": ev.counts,
            "legacy_counts": ev.legacy_counts, "models": ev.models, "skipped": ev.skipped, "paired": ev.paired,
            "notes": ev.notes,  # what the printed notes say (a K beyond a subset's gallery, ...)
            "warnings": ev.warnings}  # what was not scored and why (subsets not pulled, an empty noise gallery...)


def write_report(ev: Evaluation, out_dir: Path, store: ObjectStore | None = None) -> dict[str, Any]:
    """Write the leaderboard (Parquet, Markdown, and ``benchmark.json`` in the LookBench site's shape,
    :func:`lookbench_pipeline.scoring.site_benchmark`), the scores, ``evaluation.json`` and ``index.html`` into
    ``out_dir`` (created), and the same files under ``reports/<report_name>/`` in ``store`` when given
    (overwritten: a report is derived data, re-made at each evaluation). Returns ``{"dir", "html", "store_prefix",
    "files"}``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {}
    for name, table in (("leaderboard.parquet", leaderboard_table(ev)), ("scores.parquet", ev.scores)):
        buf = io.BytesIO()
        pq.write_table(table, buf)
        files[name] = buf.getvalue()
    files["leaderboard.md"] = leaderboard_markdown(ev).encode()
    files["evaluation.json"] = json.dumps(evaluation_json(ev), indent=2, sort_keys=True, default=str).encode()
    files["benchmark.json"] = (json.dumps(site_benchmark(ev.scores), indent=2) + "\n").encode()  # the site's shape
    files["index.html"] = render_html(ev).encode()
    types = {".parquet": "application/vnd.apache.parquet", ".md": "text/markdown; charset=utf-8",
             ".json": "application/json", ".html": "text/html; charset=utf-8"}
    for name, data in files.items():
        (out_dir / name).write_bytes(data)
    prefix = None
    if store is not None:
        prefix = f"reports/{report_name(ev)}"
        for name, data in files.items():
            store.put_bytes(f"{prefix}/{name}", data, types[Path(name).suffix])
    return {"dir": out_dir, "html": out_dir / "index.html", "store_prefix": prefix, "files": sorted(files)}
