"""The demo shop sells some models in two or three colours: each colour is its own item everywhere downstream.

The shop draws a model's colours as one page with a schema.org ProductGroup (each colour its own sku and photos,
every colour in two sizes); the extractor makes one item per colour; the build keeps them apart in the products
table, the release gallery and the evaluation's positives (exact-item matches are by item_ID).
"""

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from PIL import Image, ImageStat

from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.extract import extract_products

ROOT = Path(__file__).resolve().parents[1]


def test_demo_shop_draws_each_colour_as_its_own_item(tmp_path):
    truth = demo_shop.generate(tmp_path, 12, 3, 7, colour_models=3)
    groups: dict[str, list[str]] = {}
    for sku, t in truth["products"].items():
        if t.get("group"):
            groups.setdefault(t["group"], []).append(sku)
    assert len(groups) == 3 and all(2 <= len(v) <= 3 for v in groups.values())
    for group, skus in groups.items():
        page = (tmp_path / "products" / f"{skus[0].lower()}.html").read_text().replace("{{BASE}}", "http://s.test")
        items = extract_products(page, f"http://s.test/products/{skus[0].lower()}.html")
        # one item per colour (its two sizes merged), the colour's own sku, photos and colour, the model as group
        assert [i["sku"] for i in items] == skus
        assert [i["color"] for i in items] == [truth["products"][s]["color"] for s in skus]
        assert {i["group_id"] for i in items} == {group}
        photos = [set(i["image_urls"]) for i in items]
        assert all(len(p) == 2 for p in photos) and len(set().union(*photos)) == 2 * len(items)
        # the photos are drawn in the item's colour: the garment pixels' mean differs between colours
        means = [ImageStat.Stat(Image.open(tmp_path / "images/products" / f"{s.lower()}-0.jpg").convert("RGB")).mean
                 for s in skus]
        assert all(sum(abs(a - b) for a, b in zip(means[i], means[j])) > 10
                   for i in range(len(means)) for j in range(i + 1, len(means)))
    # looks are unchanged: they show planned products in their first colour
    assert all(s in truth["products"] and "-" not in s[len("DEMO-"):] for lk in truth["looks"].values()
               for s in lk["skus"])


def test_colour_variants_stay_apart_in_the_release(demo_config):
    """A small demo build, as the README runs it: each colour has its own product_id and gallery images, the
    colours of a model share its group_id, and a colour's query has only that colour's images as positives."""
    from lookbench_pipeline.config import load_config
    from lookbench_pipeline.pipeline import store_of
    from lookbench_pipeline.releases import list_releases, read_file

    site = yaml.safe_load((demo_config.parent / "demo.yaml").read_text())
    assert site["demo_colour_models"] >= 1  # the shipped demo site sells colour variants
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config", str(demo_config),
                           "--partition", "2026-07-01"], capture_output=True, text=True, cwd=ROOT, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = load_config(demo_config)
    products = pq.read_table(next((cfg.data_dir / "assets/products").glob("*.parquet"))).to_pylist()
    by_group: dict[str, list[dict]] = {}
    for p in products:
        if p["group_id"]:
            by_group.setdefault(p["group_id"], []).append(p)
    assert len(by_group) == site["demo_colour_models"]
    colour_of: dict[str, str] = {}  # image URL -> product_id of the colour it shows
    for group, colours in by_group.items():
        assert len(colours) >= 2 and len({p["product_id"] for p in colours}) == len(colours)
        assert len({p["color"] for p in colours}) == len(colours)
        for p in colours:
            assert p["sku"].startswith("DEMO-") and len(p["image_urls"]) == 2
            for u in p["image_urls"]:
                assert u not in colour_of, "an image shared by two colours"
                colour_of[u] = p["product_id"]
    store = store_of(cfg)
    [version] = list_releases(store)
    gallery = read_file(store, version, "real_studio_flat", "gallery").to_pylist()
    queries = read_file(store, version, "real_studio_flat", "query").to_pylist()
    variant_ids = set(colour_of.values())
    in_gallery = {g["item_ID"] for g in gallery} & variant_ids
    assert len(in_gallery) >= 2 * len(by_group) - 1, "colour variants reach the release as items of their own"
    for g in gallery:
        if g["source_url"] in colour_of:
            assert g["item_ID"] == colour_of[g["source_url"]]  # a colour's gallery image belongs to that colour
    checked = 0
    for q in queries:
        if q["item_ID"] not in variant_ids:
            continue
        positives = [g for g in gallery if g["item_ID"] == q["item_ID"]]  # the exact-item positives
        assert positives and all(colour_of.get(g["source_url"]) == q["item_ID"] for g in positives)
        checked += 1
    assert checked >= 2


def test_demo_shop_draws_look_alikes_that_only_fine_recall_forgives():
    """One planned product in LOOK_ALIKE_EVERY is a look-alike of another: the same category and every attribute
    (so the same catalogue text and labels), its own sku, other pictures (not pHash near-duplicates of its twin's).
    Ranked by the demo's baseline model, some query's first result is its look-alike: a Fine hit that is not the
    item, so exact-item Recall@1 < Fine Recall@1 < Coarse Recall@1 on the demo's studio pictures."""
    import numpy as np

    from lookbench_pipeline.embed import load_embedder
    from lookbench_pipeline.images import phash_hex

    items = demo_shop.catalogue(48, 12, 7, 3)
    by_sku = {p.sku: p for p in items}
    twins = [(p, by_sku[p.look_alike_of]) for p in items if p.look_alike_of]
    assert len(twins) == 48 // demo_shop.LOOK_ALIKE_EVERY
    for p, src in twins:
        assert p.sku != src.sku and p.category == src.category and p.truth == src.truth and p.title == src.title
        a, b = int(phash_hex(demo_shop.packshot(p)), 16), int(phash_hex(demo_shop.packshot(src)), 16)
        assert bin(a ^ b).count("1") > 6, "a look-alike's packshot is another picture, not a near-duplicate"
    emb = load_embedder("baseline/hsv-hog-v1")
    g = np.asarray(emb.embed([demo_shop.packshot(p) for p in items]), dtype=np.float32)
    q = np.asarray(emb.embed([demo_shop.alt_shot(p) for p in items]), dtype=np.float32)
    top = (q @ g.T).argmax(1)
    exact = sum(items[t].sku == p.sku for p, t in zip(items, top))
    fine = sum(items[t].category == p.category and items[t].truth == p.truth for p, t in zip(items, top))
    coarse = sum(items[t].category == p.category for p, t in zip(items, top))
    assert exact < fine < coarse, (exact, fine, coarse)
