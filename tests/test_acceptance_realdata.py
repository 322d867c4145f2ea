"""Acceptance: a whole release built from ../shared/realdata (replayed shop pages and the real photo drop)."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_release_from_real_input(tmp_path, realdata):
    cfg = yaml.safe_load((ROOT / "configs/realdata.yaml").read_text())
    cfg["data_dir"] = str(tmp_path / "data")
    cfg["store"] = {"url": str(tmp_path / "store")}
    cfg["sites"] = [str(ROOT / "configs/sites/realdata-pages.yaml")]
    cfg["drops"][0]["path"] = str(realdata / "images")
    cfg["drops"][0]["items_csv"] = str(ROOT / "configs/realdata_items.csv")
    (tmp_path / "real.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config",
                           str(tmp_path / "real.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assets = tmp_path / "data/assets"
    read = lambda name: pq.read_table(next((assets / name).glob("*.parquet")))  # noqa: E731

    # crawl: every saved page was visited and has an outcome
    log = read("crawl_log")
    pages = [u for u in log["url"].to_pylist() if "/pages/" in u]
    assert len(pages) == len(list((realdata / "pages").glob("*.html")))
    products = read("products")
    assert products.num_rows >= 25
    # images: in = accepted + rejected, every rejection has a reason; CDN images are refused, not fetched
    refs = read("image_refs").to_pylist()
    n_photos = len(list((realdata / "images/studio").iterdir())) + len(list((realdata / "images/street").iterdir()))
    assert sum(r["owner_type"] == "drop" for r in refs) == n_photos
    assert all((r["status"] == "accepted") == (r["reason"] is None) for r in refs)
    reasons = {r["reason"] for r in refs if r["owner_type"] == "product"}
    assert "host_not_allowed" in reasons
    assert all(r == "host_not_allowed" or r.startswith("http_4") for r in reasons), reasons
    # dedup: the byte-identical pair of street photos is one image
    by_source = {Path(r["source"]).name: r["image_sha256"] for r in refs if r["owner_type"] == "drop"}
    assert by_source["model-studio_catvton_049713_0.jpg"] == by_source["model-studio_ootd_049713_0.jpg"]
    # release: the known garment-worn pairs are queries with their garment in the gallery
    store = tmp_path / "store/releases"
    [version] = [p.name for p in store.iterdir() if p.is_dir()]
    manifest = json.loads((store / version / "manifest.json").read_text())
    c = manifest["counts"]
    assert c["candidates"] == c["query_rows"] + c["gallery_rows_distinct"] + c["rejected"]
    q = pq.read_table(store / version / "real_streetlook/query.parquet")
    assert set(q["item_ID"].to_pylist()) == {"vitonhd-00055", "vitonhd-14627"}
    assert "catalog-text/1" in manifest["annotators"]
    assert "Evaluation" in proc.stdout
