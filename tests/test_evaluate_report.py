"""The evaluation: models scored or skipped with a reason, cutoffs, contamination exclusions, legacy beside live,
the leaderboard and the HTML report (opened in a real headless chromium)."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import ImageOps

from lookbench_pipeline import schemas
from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.demo.legacy import write_demo_trees
from lookbench_pipeline.config import LegacySource
from lookbench_pipeline.embed import BASELINE_ID
from lookbench_pipeline.evaluate import ModelEntry, registry_entries, run_evaluation, unavailable_reason
from lookbench_pipeline.releases import ReleaseTables
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import LocalStore
from lookbench_pipeline.windows import Window

VERSION = "v20260630"


def _jpeg(im) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=88)
    return buf.getvalue()


def _row(data: bytes, subset: str, role: str, sid: str, p, first_seen: datetime, attrs: list[dict]) -> dict:
    return {"image": {"bytes": data, "path": f"{sid}.jpg"}, "item_ID": p.sku, "category": p.category,
            "main_attribute": "", "other_attributes": "", "task": "single-item", "difficulty": "easy",
            "sample_id": sid, "subset": subset, "role": role, "attributes": attrs, "annotator": "test",
            "image_sha256": hashlib.sha256(data).hexdigest(), "width": 320, "height": 400, "look_id": None,
            "box": None, "site": "demo", "source_url": f"https://demo.invalid/{sid}", "crawled_at": first_seen,
            "first_seen_at": first_seen}


def publish_release(store, n: int = 16) -> dict:
    """Two subsets over the demo shop's generator: alternative shots as queries, packshots as the gallery;
    queries first seen on the 1st of months 1..6 of 2026 in turn (street-look queries upside down, so the subsets
    share no image: a left-right mirror is a copy, which the contamination check finds as ``mirrored``). Studio
    queries carry an attribute no gallery item has, with adversarial HTML in it."""
    products, _ = demo_shop.plan(n, 0, 21)
    files = {}
    for subset, offset in (("real_studio_flat", 0), ("real_streetlook", 1)):
        q, g = [], []
        for i, p in enumerate(products):
            seen = datetime(2026, 1 + (i + offset) % 6, 1, 12, tzinfo=timezone.utc)
            attrs = [{"name": "color", "value": p.color}, {"name": "pattern", "value": p.pattern}]
            shot = demo_shop.alt_shot(p)
            if offset:
                shot = ImageOps.flip(shot)
            else:
                attrs.append({"name": "note", "value": "<b>red</b>"})
            # a sample_id names one image in the whole release (embeddings are keyed by it): the subsets' queries
            # differ, their galleries share the packshots
            q.append(_row(_jpeg(shot), subset, "query", f"{'strt' if offset else 'real'}q{i}", p, seen, attrs))
            g.append(_row(_jpeg(demo_shop.packshot(p)), subset, "gallery", f"{subset[:4]}g{i}", p, seen,
                          [{"name": "color", "value": p.color}, {"name": "pattern", "value": p.pattern}]))
        files[(subset, "query")] = schemas.from_rows(q, schemas.RELEASE)
        files[(subset, "gallery")] = schemas.from_rows(g, schemas.RELEASE)
    w = Window(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 7, 1, tzinfo=timezone.utc))
    return publish(ReleaseTables(VERSION, w, files, counts={"query_rows": 2 * n,
                                                               "rejected_by_reason": {"contamination:f200k": 3}}),
                   store, {"code_version": "test"})


@pytest.fixture(scope="module")
def release_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalstore")
    store = LocalStore(root / "store")
    publish_release(store)
    return store, root


@pytest.fixture(scope="module")
def evaluation(release_store):
    """One full evaluation, shared by the tests below: the baseline, a model whose weights are not here, the
    fallback registry; both legacy formats; a contamination index holding a copy of one query."""
    from lookbench_pipeline import contamination
    from lookbench_pipeline.releases import read_file

    store, root = release_store
    leak = root / "leaked"
    leak.mkdir(exist_ok=True)
    q = read_file(store, VERSION, "real_streetlook", "query")
    (leak / "copy.jpg").write_bytes(q["image"][3].as_py()["bytes"])
    index, _ = contamination.update_index(root / "index.parquet",
                                          [LegacySource(name="leaky", kind="folder", path=leak)])
    legacy = [LegacySource(name="inshop", kind="deepfashion_inshop", path=Path("legacy/inshop"), demo=True),
              LegacySource(name="f200k", kind="fashion200k", path=Path("legacy/f200k"), demo=True)]
    with pytest.raises(ValueError, match="demo tree"):  # the demo writes its trees; the evaluation only reads
        run_evaluation(store, VERSION, [], None, (1,), legacy=legacy, data_dir=root)
    assert write_demo_trees(legacy, root) == [root / "legacy/inshop", root / "legacy/f200k"]
    ev = run_evaluation(store, VERSION, [BASELINE_ID, "no-such-org/no-such-model"], root / "emb", (1, 5, 10, 20),
                        registry=True, legacy=legacy, data_dir=root, contamination_index=index, n_examples=3)
    return ev, store, root


def _vals(ev, subset, metric, model=BASELINE_ID):
    return [r for r in ev.scores.to_pylist() if (r["model"], r["subset"], r["metric"]) == (model, subset, metric)]


def test_scores_every_metric_per_subset_and_overall(evaluation):
    ev, _, _ = evaluation
    metrics = {f"{f}@{k}" for f in ("coarse_recall", "fine_recall", "item_recall", "ndcg") for k in (1, 5, 10, 20)}
    for subset in ("real_studio_flat", "real_streetlook", "overall"):
        got = {r["metric"] for r in ev.scores.to_pylist() if r["model"] == BASELINE_ID and r["subset"] == subset}
        assert got == metrics, subset
    for m in metrics:
        [a], [b], [o] = (_vals(ev, s, m) for s in ("real_studio_flat", "real_streetlook", "overall"))
        assert o["value"] == pytest.approx((a["value"] * a["n_queries"] + b["value"] * b["n_queries"]) /
                                           (a["n_queries"] + b["n_queries"])), "query-count weighted"
        for r in (a, b, o):
            assert r["ci_low"] <= r["value"] + 1e-12 and r["value"] <= r["ci_high"] + 1e-12
    [r1], [r20] = _vals(ev, "overall", "item_recall@1"), _vals(ev, "overall", "item_recall@20")
    assert 0 < r1["value"] <= r20["value"]


def test_contamination_excluded_and_counted(evaluation):
    ev, _, _ = evaluation
    assert ev.counts["real_streetlook"]["excluded_contamination"] == 1
    assert ev.counts["real_streetlook"]["excluded_by_source"] == {"leaky": 1}
    assert ev.counts["real_studio_flat"]["excluded_contamination"] == 0
    assert ev.counts["release_rejected_contamination"] == {"f200k": 3}
    assert _vals(ev, "real_streetlook", "fine_recall@1")[0]["n_queries"] == 15
    assert _vals(ev, "real_studio_flat", "fine_recall@1")[0]["n_queries"] == 16


def test_models_that_cannot_run_are_skipped_with_the_reason(evaluation):
    ev, _, _ = evaluation
    skipped = {s["model"]: s["reason"] for s in ev.skipped}
    # the baseline, then every registry model that can run here (the wheel-shipped ones, with the models extra)
    runnable = [e.model_id for e in registry_entries() if e.model_id != BASELINE_ID and unavailable_reason(e) is None]
    assert [m["model"] for m in ev.models] == [BASELINE_ID, *runnable]
    assert "no-such-org/no-such-model" in skipped
    assert re.search(r"weights not available offline|needs", skipped["no-such-org/no-such-model"])
    assert "srpone/gr-lite" in skipped and "openai/clip-vit-b-32" in skipped, "the registry is listed"
    assert all(skipped.values())


def test_legacy_scores_beside_live(evaluation):
    from lookbench_pipeline.report import gap_rows

    ev, _, root = evaluation
    assert (root / "legacy/inshop/Eval/list_eval_partition.txt").is_file() and (root / "legacy/f200k/labels").is_dir()
    for name in ("inshop", "f200k"):
        [r] = _vals(ev, f"legacy:{name}", "item_recall@1")
        assert r["n_queries"] == ev.legacy_counts[name]["queries"] > 0 and r["ci_low"] <= r["value"] <= r["ci_high"]
    gaps = {(g["legacy"], g["metric"]): g for g in gap_rows(ev) if g["model"] == BASELINE_ID}
    g = gaps[("inshop", "item_recall@1")]
    assert g["gap_pp"] == pytest.approx(100 * (g["legacy_value"] - g["live_value"]))
    assert g["live_value"] == _vals(ev, "overall", "item_recall@1")[0]["value"]


def _first_seen_after(store, cut: date) -> dict[str, int]:
    from lookbench_pipeline.releases import read_file

    ts = datetime(cut.year, cut.month, cut.day, tzinfo=timezone.utc)
    out = {s: sum(t >= ts for t in read_file(store, VERSION, s, "query")["first_seen_at"].to_pylist())
           for s in ("real_studio_flat", "real_streetlook")}
    return {**out, "overall": sum(out.values())}


def test_cutoffs(release_store, monkeypatch):
    store, root = release_store
    ev = run_evaluation(store, VERSION, [BASELINE_ID], root / "emb", (1, 10), cutoff=date(2026, 4, 1), n_examples=0)
    rows = [r for r in ev.scores.to_pylist() if r["metric"] == "item_recall@1"]
    expected = _first_seen_after(store, date(2026, 4, 1))
    assert {r["subset"]: r["n_queries"] for r in rows} == expected and 0 < expected["overall"] < 32
    assert {r["cutoff"] for r in rows} == {"2026-04-01"}
    # a model's declared training cutoff, from the registry (patched where run_evaluation looks it up)
    from lookbench_pipeline.evaluate import run

    monkeypatch.setattr(run, "registry_entries",
                        lambda: [ModelEntry(BASELINE_ID, training_cutoff=date(2026, 6, 1))])
    ev = run_evaluation(store, VERSION, [BASELINE_ID], root / "emb", (1,), cutoff="model", n_examples=0)
    assert {r["n_queries"] for r in ev.scores.to_pylist() if r["subset"] == "overall"} == \
        {_first_seen_after(store, date(2026, 6, 1))["overall"]}
    assert ev.models[0]["cutoff"] == "2026-06-01" and ev.models[0]["cutoff_source"] == "model"
    # an override in the configuration wins over the registry
    ev = run_evaluation(store, VERSION, [BASELINE_ID], root / "emb", (1,), cutoff="model", n_examples=0,
                        model_cutoffs={BASELINE_ID: "2026-05-01"})
    assert {r["n_queries"] for r in ev.scores.to_pylist() if r["subset"] == "overall"} == \
        {_first_seen_after(store, date(2026, 5, 1))["overall"]}
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        run_evaluation(store, VERSION, [BASELINE_ID], None, (1,), cutoff="last year")


def test_unavailable_reasons(tmp_path, monkeypatch):
    import importlib.util

    assert unavailable_reason(ModelEntry(BASELINE_ID)) is None
    assert "needs CUDA" in unavailable_reason(ModelEntry("org/big", needs_cuda=True), cuda=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "open_clip" else real(n, *a))
    assert "needs open_clip" in unavailable_reason(ModelEntry("open_clip:ViT-B-32/openai"))
    monkeypatch.setattr(importlib.util, "find_spec", real)
    if real("torch") and real("transformers"):
        assert "weights not available offline" in unavailable_reason(ModelEntry("org/not-cached"))
        assert unavailable_reason(ModelEntry(str(tmp_path))) is None, "a local folder is tried"


@pytest.fixture(scope="module")
def report(evaluation, tmp_path_factory):
    """The report of the shared evaluation, written once (folder and store)."""
    from lookbench_pipeline.report import write_report

    ev, store, _ = evaluation
    return write_report(ev, tmp_path_factory.mktemp("report") / "rep", store)


def test_leaderboard_files_and_markdown(evaluation, report):
    ev, store, _ = evaluation
    assert report["store_prefix"] == f"reports/{VERSION}"
    tmp_path = report["dir"].parent
    for name in ("index.html", "leaderboard.md", "leaderboard.parquet", "scores.parquet", "evaluation.json"):
        assert (tmp_path / "rep" / name).is_file()
        assert store.get_bytes(f"reports/{VERSION}/{name}") == (tmp_path / "rep" / name).read_bytes()
    lb = pq.read_table(tmp_path / "rep/leaderboard.parquet")
    assert lb.schema.names[:6] == ["release", "subset", "rank", "model", "n_queries", "cutoff"]
    assert "fine_recall@20" in lb.schema.names and "ndcg@20" in lb.schema.names
    overall = [r for r in lb.to_pylist() if r["subset"] == "overall"]
    assert overall[0]["rank"] == 1 and \
        overall[0]["fine_recall@1"] == _vals(ev, "overall", "fine_recall@1", overall[0]["model"])[0]["value"]
    legacy_row = next(r for r in lb.to_pylist() if r["subset"] == "legacy:inshop")
    assert legacy_row["fine_recall@1"] is None and legacy_row["item_recall@1"] is not None
    md = (tmp_path / "rep/leaderboard.md").read_text()
    assert "## overall" in md and "Legacy against live" in md and "no-such-org/no-such-model" in md
    assert "excluded at evaluation as contamination (current index): 1" in md


def test_report_html_is_self_contained_and_escaped(report):
    page = report["html"].read_text(encoding="utf-8")
    srcs = re.findall(r"""\s(?:src|href)=["']([^"']*)""", page)
    assert srcs and all(s.startswith("data:image/") for s in srcs)
    assert "http://" not in page and "https://" not in page
    assert "&lt;b&gt;red&lt;/b&gt;" in page and "<b>red</b>" not in page, "text from the release is escaped"
    n_plots = len(re.findall(r"class='plot'", page))
    assert n_plots == 3, "real_studio_flat, real_streetlook, overall"
    assert page.count("class='ex'") == 6 and page.count("class=\"hit\"") >= 1


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _open(pages: list[tuple[Path, Path]]) -> list[tuple[list, list, list]]:
    """Open each page in one headless chromium with every non-file request blocked, screenshot it; returns per
    page (requests refused, console errors, [(src prefix, complete, naturalWidth)])."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run"])
        try:
            for page_path, shot in pages:
                refused, errors = [], []
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))

                def gate(route, refused=refused):
                    if route.request.url.startswith(("file:", "data:")):
                        route.continue_()
                    else:
                        refused.append(route.request.url)
                        route.abort()

                page.route("**/*", gate)
                page.goto(page_path.as_uri(), wait_until="load", timeout=120_000)  # load: every <img> settled
                images = page.evaluate("Array.from(document.images).map(i => [i.src.slice(0, 15), i.complete, "
                                       "i.naturalWidth])")
                page.screenshot(path=str(shot), full_page=True)
                page.close()
                out.append((refused, errors, images))
        finally:
            browser.close()
    return out


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make test installs it as root)")
def test_report_in_headless_chromium(report, tmp_path):
    pytest.importorskip("playwright.sync_api", reason="playwright (comes with scrapy-playwright) not installed")
    from PIL import Image

    html_path = report["html"]
    # and a page that reaches for the network, to show the same harness sees it: the test can fail
    bad = tmp_path / "bad.html"
    bad.write_text(html_path.read_text().replace("</body>", "<img src='http://198.51.100.7/x.png'></body>"))
    (refused, errors, images), (bad_refused, bad_errors, bad_images) = _open(
        [(html_path, tmp_path / "report.png"), (bad, tmp_path / "bad.png")])
    assert refused == [], "the report loads offline"
    assert errors == [], "no console errors"
    assert len(images) >= 3 + 3 * 2 * 6, "plots, and each sampled query with its top-5"
    assert all(complete and width > 0 for _, complete, width in images), [i for i in images if not i[2]]
    shot = Image.open(tmp_path / "report.png")
    assert shot.format == "PNG" and shot.width == 1280 and shot.height > 2000
    px = np.asarray(shot.convert("RGB").resize((64, 256)))
    assert px.std() > 10 and len(np.unique(px.reshape(-1, 3), axis=0)) > 200, "not a blank page (a blank one: std 0)"
    assert bad_refused or bad_errors
    assert any(w == 0 for _, _, w in bad_images)


def test_cli_evaluate_with_report_and_progress(release_store, tmp_path, capsys):
    import yaml

    from lookbench_pipeline.cli import main

    store, root = release_store
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": str(root / "cli-data"), "store": {"url": str(root / "store")}}))
    rc = main(["evaluate", "--config", str(cfg), "--release", VERSION, "--model", BASELINE_ID, "--cutoff",
               "2026-04-01", "--no-legacy", "--report", str(tmp_path / "rep"), "--output", str(tmp_path / "s.parquet")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "embedding baseline/hsv-hog-v1" in err and "scoring baseline/hsv-hog-v1" in err, "tqdm progress bars"
    assert "item_recall@1" in out and f"report: {tmp_path / 'rep' / 'index.html'}" in out
    assert (tmp_path / "rep/index.html").is_file() and (tmp_path / "rep/leaderboard.parquet").is_file()
    scores = pq.read_table(tmp_path / "s.parquet")
    assert set(scores["cutoff"].to_pylist()) == {"2026-04-01"}
    assert not any(s.startswith("legacy:") for s in scores["subset"].to_pylist())
    assert not list(store.list(f"reports/{VERSION}-cutoff-")), "the CLI writes its report only where --report says"
    rc = main(["evaluate", "--config", str(cfg), "--release", VERSION, "--model", "no-such-org/model", "--quiet",
               "--no-legacy"])
    out, err = capsys.readouterr()
    assert rc == 1 and "skipped no-such-org/model" in err and f"nothing was scored on {VERSION}" in err
    assert "not in the model registry" in err  # an unknown id says how it was read
    # a cutoff after every query: says so, instead of an empty table
    rc = main(["evaluate", "--config", str(cfg), "--release", VERSION, "--model", BASELINE_ID, "--quiet",
               "--no-legacy", "--cutoff", "2030-01-01"])
    out, err = capsys.readouterr()
    assert rc == 1 and f"nothing was scored on {VERSION}" in err
    assert "none of the others first seen on or after the cutoff 2030-01-01" in err and "not scored: " in err
    # ... also when a legacy benchmark was scored beside it: its rows are no score on the release
    legacy_cfg = tmp_path / "legacy.yaml"
    legacy_cfg.write_text(yaml.safe_dump({
        "data_dir": str(root / "cli-data"), "store": {"url": str(root / "store")},
        "evaluate": {"legacy": [{"name": "deepfashion-inshop-demo", "kind": "deepfashion_inshop",
                                 "path": "legacy/deepfashion-inshop-demo", "demo": True}]}}))
    rc = main(["evaluate", "--config", str(legacy_cfg), "--release", VERSION, "--model", BASELINE_ID, "--quiet",
               "--cutoff", "2030-01-01"])
    out, err = capsys.readouterr()
    assert "legacy:deepfashion-inshop-demo" in out, "the legacy benchmark's table is still shown"
    assert rc == 1 and f"no query of {VERSION} was scored, only the legacy benchmarks" in err
    assert "none of the others first seen on or after the cutoff 2030-01-01" in err
    rc = main(["evaluate", "--config", str(cfg), "--release", VERSION, "--cutoff", "spring"])
    assert rc == 2 and "YYYY-MM-DD or model" in capsys.readouterr().err  # a usage error


def test_cli_evaluate_with_a_store_only_config_scores_no_demo_legacy_benchmark(release_store, tmp_path, capsys,
                                                                             monkeypatch):
    """A configuration file without ``sites`` (only where the store is) is not the embedded demo: ``evaluate``
    scores the release alone, neither generating nor scoring the demo shop's legacy trees beside it (they are a
    default of the built-in configuration only), for a version in the store and for a pulled folder alike."""
    import yaml

    from lookbench_pipeline.cli import main

    store, root = release_store
    monkeypatch.delenv("LOOKBENCH_CONFIG", raising=False)
    data = tmp_path / "data"
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": str(data), "store": {"url": str(root / "store")}}))
    assert main(["pull", VERSION, "--store", str(root / "store"), "--dest", str(tmp_path / "pulled"), "--quiet"]) == 0
    pulled = next(p.parent for p in (tmp_path / "pulled").rglob("manifest.json"))
    capsys.readouterr()
    for release in (["--release", VERSION], [str(pulled)]):
        rc = main(["evaluate", "--config", str(cfg), *release, "--model", BASELINE_ID, "--quiet",
                   "--output", str(tmp_path / "s.parquet")])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert "legacy:" not in out, "no demo legacy benchmark scored"
        subsets = set(pq.read_table(tmp_path / "s.parquet")["subset"].to_pylist())
        assert subsets and not any(s.startswith("legacy:") for s in subsets)
        assert not (data / "legacy").exists(), "no demo legacy tree generated"


def test_two_models_paired_test_and_report(release_store, tmp_path, monkeypatch):
    """A second model that can run (the baseline on images blurred to a few pixels: worse): both are scored, the
    paired bootstrap compares them on the same queries, and the report shows both."""
    from PIL import ImageFilter

    from lookbench_pipeline.embed import HsvHogEmbedder
    from lookbench_pipeline.evaluate import run
    from lookbench_pipeline.report import leaderboard_table, render_html

    class Blurred(HsvHogEmbedder):
        model_id = "test/blurred-baseline"

        def embed(self, images):
            return super().embed([im.filter(ImageFilter.BoxBlur(40)) for im in images])

        def info(self):
            return {**super().info(), "model_id": self.model_id}

    real_load, real_reason = run.load_embedder, run.unavailable_reason  # where run_evaluation looks them up
    monkeypatch.setattr(run, "load_embedder", lambda m: Blurred() if m == Blurred.model_id else real_load(m))
    monkeypatch.setattr(run, "unavailable_reason",
                        lambda e, cuda=None: None if e.model_id == Blurred.model_id else real_reason(e, cuda))
    store, root = release_store
    ev = run_evaluation(store, VERSION, [Blurred.model_id, BASELINE_ID], root / "emb", (1, 5, 10, 20), n_examples=2)
    assert [m["model"] for m in ev.models] == [Blurred.model_id, BASELINE_ID] and not ev.skipped
    tests = {p["metric"]: p for p in ev.paired}
    assert set(tests) == {"coarse_recall@1", "fine_recall@1", "item_recall@1", "ndcg@5"}
    t = tests["item_recall@1"]
    [a] = _vals(ev, "overall", "item_recall@1", t["model_a"])
    [b] = _vals(ev, "overall", "item_recall@1", t["model_b"])
    assert t["model_a"] == BASELINE_ID and t["n_queries"] == 32 and t["diff"] == pytest.approx(a["value"] - b["value"])
    assert t["diff"] > 0 and t["ci_low"] <= t["diff"] <= t["ci_high"]
    lb = [r for r in leaderboard_table(ev).to_pylist() if r["subset"] == "overall"]
    assert [r["rank"] for r in lb] == [1, 2] and lb[0]["model"] == BASELINE_ID
    page = render_html(ev, plots={})
    assert "Paired bootstrap tests" in page and page.count("test/blurred-baseline</div>") == 4


def test_rescoring_from_the_cache_reads_no_image_and_files_are_verified(release_store, tmp_path, monkeypatch):
    import json

    from lookbench_pipeline import evaluate
    from lookbench_pipeline.releases import ReleaseIntegrityError

    src_store, root = release_store
    shutil.copytree(root / "store", tmp_path / "store")
    store = LocalStore(tmp_path / "store")
    first = run_evaluation(store, VERSION, [BASELINE_ID], tmp_path / "emb", (1, 5), n_examples=0)
    memo = json.loads((tmp_path / "emb/verified_release_files.json").read_text())
    assert len(memo) == 4, "each file hashed once and remembered"
    monkeypatch.setattr(evaluate.ReleaseFile, "images", lambda self: pytest.fail("image bytes were read"))
    again = run_evaluation(store, VERSION, [BASELINE_ID], tmp_path / "emb", (1, 5), n_examples=0)
    assert again.scores.to_pylist() == first.scores.to_pylist()
    monkeypatch.undo()
    f = tmp_path / "store/releases" / VERSION / "real_streetlook/gallery.parquet"
    data, st = bytearray(f.read_bytes()), f.stat()
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same modification time: still hashed again
    with pytest.raises(ReleaseIntegrityError, match="sha256"):
        run_evaluation(store, VERSION, [BASELINE_ID], tmp_path / "emb", (1,), n_examples=0)


# For every table: its width against the room it has; for every cell holding a bootstrap interval: how many line
# boxes its text takes (one text node per cell, so a Range over it gives one client rect per line).
_LAYOUT_JS = """() => {
  const tables = Array.from(document.querySelectorAll('table')).map(t => {
    const room = t.parentElement.getBoundingClientRect().width;
    return [t.getBoundingClientRect().width, room];
  });
  const cells = Array.from(document.querySelectorAll('td')).filter(td => td.textContent.includes('[')).map(td => {
    const r = document.createRange(); r.selectNodeContents(td);
    const lines = new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top)));
    return [td.textContent, lines.size];
  });
  return {page: [document.documentElement.scrollWidth, window.innerWidth], tables, cells};
}"""


def _wide_evaluation(ev):
    """The shared evaluation as a production one looks: a second model with a long Hugging Face id, a declared
    cutoff, and the noise-gallery metrics (distractor@1, soft_negative@1) beside the others, all with intervals."""
    import dataclasses

    import pyarrow as pa

    rows = ev.scores.to_pylist()
    long_id = "facebook/dinov3-vitl16-pretrain-lvd1689m"
    extra = [{**r, "model": long_id, "cutoff": "2025-08-14"} for r in rows]
    noise = [{**r, "metric": m} for r in rows + extra if r["metric"].startswith("item_recall@1")
             and not r["subset"].startswith("legacy:") for m in ("distractor@1", "soft_negative@1")]
    scores = pa.Table.from_pylist(rows + extra + noise, schema=ev.scores.schema)
    return dataclasses.replace(ev, scores=scores, models=ev.models + [{**ev.models[0], "model": long_id}])


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make test installs it as root)")
@pytest.mark.parametrize("width", [1280, 1920])
def test_report_reads_well_at_desktop_widths(evaluation, tmp_path, width):
    """At 1280 and 1920 px the page never scrolls sideways, every table fits the width it is given, and no
    confidence interval wraps (each interval cell is one line), on a report as wide as a production one (two models,
    a long model id, every summary metric with the noise-gallery ones); the screenshots are kept under
    $LOOKBENCH_UI_SCREENSHOTS when set."""
    pytest.importorskip("playwright.sync_api", reason="playwright (comes with scrapy-playwright) not installed")
    import os

    from playwright.sync_api import sync_playwright

    from lookbench_pipeline.report import write_report

    report = write_report(_wide_evaluation(evaluation[0]), tmp_path / "wide")

    shots = Path(os.environ.get("LOOKBENCH_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            page.goto(report["html"].as_uri(), wait_until="load", timeout=120_000)
            layout = page.evaluate(_LAYOUT_JS)
            page.screenshot(path=str(shots / f"report_{width}px.png"), full_page=True)
        finally:
            browser.close()
    scroll_width, inner = layout["page"]
    assert scroll_width <= inner, f"the page scrolls sideways at {width} px ({scroll_width} > {inner})"
    assert layout["tables"], "the report has tables"
    for table_width, room in layout["tables"]:
        assert table_width <= room + 0.5, f"a table is wider ({table_width}) than its room ({room}) at {width} px"
    assert layout["cells"], "the leaderboard shows intervals"
    wrapped = [text for text, lines in layout["cells"] if lines != 1]
    assert not wrapped, f"intervals wrap at {width} px: {wrapped[:3]}"
