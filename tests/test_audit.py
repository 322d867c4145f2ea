"""The human audit: a stratified sample of a published release's labels, the review form, precision with Wilson
intervals."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

import pytest
from PIL import Image

from lookbench_pipeline import cli, schemas
from lookbench_pipeline.audit import sample_release, score, stratified_precision, wilson_interval
from lookbench_pipeline.releases import ReleaseTables
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.store import LocalStore
from lookbench_pipeline.windows import Window


def test_wilson_interval_known_values():
    # Wilson (1927); values as tabulated e.g. by Newcombe 1998 (Stat Med 17:857), method 3
    assert wilson_interval(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(15, 148) == pytest.approx((0.0624, 0.1605), abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_stratified_precision_weights_strata_by_size():
    # a big stratum at 50% and a small one at 100%: the estimate follows the big one
    r = stratified_precision({"big": (900, 20, 10), "small": (100, 20, 20)})
    assert r["precision"] == pytest.approx(0.9 * 0.5 + 0.1 * 1.0)
    assert r["ci_low"] < r["precision"] < r["ci_high"] and r["reviewed"] == 40 and r["strata"] == 2
    # one stratum, all reviewed (a census): no sampling error left, the interval is Wilson's at n
    census = stratified_precision({"s": (10, 10, 8)})
    assert census["precision"] == 0.8
    assert (census["ci_low"], census["ci_high"]) == pytest.approx(wilson_interval(8, 10))
    assert stratified_precision({"s": (10, 0, 0)}) is None


def _jpeg(i: int) -> bytes:
    b = io.BytesIO()
    Image.new("RGB", (40, 40), (i * 40 % 256, 10, 10)).save(b, "JPEG")
    return b.getvalue()


def _published(tmp_path):
    """A release with 30 items: 20 tops (color, sleeve_length) and 10 bags (color, bag_type)."""
    t0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
    gallery, query = [], []
    for i in range(30):
        cat = "top" if i < 20 else "bag"
        attrs = [{"name": "color", "value": ["red", "blue"][i % 2]}]
        attrs.append({"name": "sleeve_length", "value": "short"} if cat == "top" else
                     {"name": "bag_type", "value": "tote"})
        row = {"image": {"bytes": _jpeg(i), "path": f"{i}.jpg"}, "item_ID": f"item{i:02d}", "category": cat,
               "main_attribute": "", "other_attributes": "", "task": "single-item", "difficulty": "easy",
               "sample_id": f"g{i}", "subset": "real_studio_flat", "role": "gallery", "attributes": attrs,
               "annotator": "vlm:m@p", "image_sha256": f"{i:064x}", "width": 40, "height": 40,
               "crawled_at": t0, "first_seen_at": t0}
        gallery.append(row)
        if i < 5:
            query.append({**row, "sample_id": f"q{i}", "role": "query", "image_sha256": f"{i + 100:064x}"})
    w = Window(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 7, 1, tzinfo=timezone.utc))
    store = LocalStore(tmp_path / "store")
    publish(ReleaseTables("v20260630", w, {("real_studio_flat", "query"): schemas.from_rows(query, schemas.RELEASE),
                                           ("real_studio_flat", "gallery"): schemas.from_rows(gallery,
                                                                                              schemas.RELEASE)}),
            store, {})
    (tmp_path / "p.yaml").write_text(f"data_dir: {tmp_path / 'data'}\nstore: {{url: {tmp_path / 'store'}}}\n")
    return store


def test_sample_is_stratified_one_label_per_item(tmp_path):
    store = _published(tmp_path)
    rows, images = sample_release(store, "v20260630", per_stratum=6, seed=1)
    strata = {(r.category, r.attribute): r.stratum_size for r in rows}
    assert strata == {("top", "color"): 20, ("top", "sleeve_length"): 20, ("bag", "color"): 10,
                      ("bag", "bag_type"): 10}
    assert len(rows) == 4 * 6 and len({r.audit_id for r in rows}) == 24
    # shown on the gallery packshot, whose bytes are exported
    assert all(int(r.image_sha256, 16) < 30 for r in rows) and set(images) == {r.image_sha256 for r in rows}
    assert sample_release(store, "v20260630", per_stratum=6, seed=1)[0] == rows  # deterministic in the seed
    assert len(sample_release(store, "v20260630", per_stratum=100)[0]) == 60  # capped by the stratum


def test_export_review_and_score_through_the_cli(tmp_path, capsys):
    _published(tmp_path)
    out = tmp_path / "audit"
    assert cli.main(["audit", "export", "v20260630", "--out", str(out), "--per-stratum", "5",
                     "--config", str(tmp_path / "p.yaml")]) == 0
    html = (out / "index.html").read_text()
    assert "Download verdicts CSV" in html and "top/color/" in html
    with (out / "audit.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20 and all((out / r["image"]).is_file() for r in rows)
    assert cli.main(["audit", "score", str(out / "audit.csv")]) == 0
    assert "pending 20" in capsys.readouterr().out
    # a reviewer: every bag label and top sleeve label correct; top colours: 3 of 5 correct, one unsure, one open
    top_colors = [r for r in rows if (r["category"], r["attribute"]) == ("top", "color")]
    for r in rows:
        r["verdict"] = "correct"
    for r, v in zip(top_colors, ["correct", "correct", "correct", "incorrect", "unsure"]):
        r["verdict"] = v
    rows.append({**rows[0], "audit_id": "extra", "verdict": ""})
    with (tmp_path / "verdicts.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    result = score(tmp_path / "verdicts.csv")
    assert (result["reviewed"], result["unsure"], result["pending"]) == (19, 1, 1)
    assert result["by_stratum"]["top/color"]["precision"] == 0.75
    assert result["by_stratum"]["bag/bag_type"]["precision"] == 1.0
    # overall: strata weighted by size (20, 20, 10, 10) of 60 labels
    assert result["overall"]["precision"] == pytest.approx((20 * 0.75 + 20 + 10 + 10) / 60)
    assert result["by_attribute"]["color"]["precision"] == pytest.approx((20 * 0.75 + 10) / 30)
    # only top/color varies: var = W^2 (1 - n/N) p (1 - p) / (n - 1) with W = 20/60, n = 4 reviewed of N = 20
    p = (20 * 0.75 + 40) / 60
    var = (1 / 3) ** 2 * (1 - 4 / 20) * 0.75 * 0.25 / 3
    n_eff = p * (1 - p) / var
    assert (result["overall"]["ci_low"], result["overall"]["ci_high"]) == pytest.approx(
        wilson_interval(p * n_eff, n_eff))
    assert result["overall"]["ci_low"] < p < result["overall"]["ci_high"] <= 1.0
    assert cli.main(["audit", "score", str(tmp_path / "verdicts.csv"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reviewed"] == 19
    rows[0]["verdict"] = "maybe"
    with (tmp_path / "bad.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(ValueError, match="maybe"):
        score(tmp_path / "bad.csv")
