"""Soft-negative mining from Fashion200K (its own format and its Parquet copy) into the release's noise gallery."""

import hashlib
import io
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from lookbench_pipeline import schemas
from lookbench_pipeline.annotate import CatalogTextAnnotator
from lookbench_pipeline.config import LegacySource, load_config
from lookbench_pipeline.contamination import LegacyFormatError, iter_source, update_index
from lookbench_pipeline.embed import EmbeddingCache
from lookbench_pipeline.images import ImageRef, take_in
from lookbench_pipeline.negatives import MiningConfig, QueryItem, agreement, label_pool_item, mine
from lookbench_pipeline.releases import ReleaseTables, check_candidate
from lookbench_pipeline.releases.build import _noise_gallery, noise_rows
from lookbench_pipeline.store import LocalStore
from lookbench_pipeline.taxonomy import Taxonomy
from lookbench_pipeline.windows import Window

TAX = Taxonomy.load()
T0 = datetime(2026, 8, 1, tzinfo=timezone.utc)


def _texture(seed: int, colour: tuple[int, int, int], size=(96, 128)) -> Image.Image:
    """A garment-like picture: a base colour with a seeded luminance texture (never "uniform")."""
    rng = np.random.default_rng(seed)
    tex = rng.integers(-40, 40, (size[1] // 8, size[0] // 8, 1)).repeat(8, 0).repeat(8, 1)
    a = np.clip(np.array(colour)[None, None, :] + tex, 0, 255).astype(np.uint8)
    return Image.fromarray(a)


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _pixels(im: Image.Image) -> str:
    return hashlib.sha256(np.asarray(im.convert("RGB")).tobytes()).hexdigest()


class LookupEmbedder:
    """A test embedder with exact, chosen similarities: each known picture (by its pixels) has a fixed vector."""

    model_id, dim, input_size = "test/lookup", 4, None

    def __init__(self):
        self.table: dict[str, np.ndarray] = {}
        self.images = 0

    def add(self, im: Image.Image, v) -> None:
        v = np.asarray(v, np.float32)
        self.table[_pixels(im)] = v / np.linalg.norm(v)

    def embed(self, images):
        self.images += len(images)
        return np.stack([self.table[_pixels(im)] for im in images]) if images else np.zeros((0, 4), np.float32)

    def info(self):
        return {"model_id": self.model_id, "revision": "1", "input_size": None, "dim": 4, "weights_sha256": None}


def _toward(s: float, axis: int = 0, other: int = 3) -> np.ndarray:
    v = np.zeros(4)
    v[axis], v[other] = s, np.sqrt(1 - s * s)
    return v


def _f200k(root: Path, entries: list[tuple[str, str, str, bytes | None]]) -> None:
    """Fashion200K's own layout: entries (label category, relative path, description, bytes or None = missing)."""
    by_label: dict[str, list[str]] = {}
    for cat, rel, desc, data in entries:
        if data is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        by_label.setdefault(cat, []).append(f"{rel}\t0.9\t{desc}")
    (root / "labels").mkdir(parents=True, exist_ok=True)
    for cat, lines in by_label.items():
        split = "test" if cat == "top" else "train"
        (root / "labels" / f"{cat}_{split}_detect_all.txt").write_text("\n".join(lines) + "\n")


def test_fashion200k_readers_own_format_and_parquet(tmp_path):
    img = _png(_texture(1, (200, 30, 30)))
    _f200k(tmp_path / "f", [("dress", "women/dresses/casual_dresses/111/111_0.jpeg", "red floral maxi dress", img),
                            ("top", "women/tops/blouses/222/222_0.jpeg", "white cotton blouse", img)])
    got = list(iter_source("fashion200k", tmp_path / "f"))
    assert [(g.item_id, g.description, g.categories) for g in got] == [
        ("111", "red floral maxi dress", ("dress", "dresses", "casual dresses")),
        ("222", "white cotton blouse", ("top", "tops", "blouses"))]
    assert got[0].read_bytes() == img
    (tmp_path / "p").mkdir()
    t = pa.table({"image": [{"bytes": img, "path": "a.jpeg"}, {"bytes": None, "path": None}],
                  "category1": ["jackets", "shoes"], "category2": ["leather jackets", None], "category3": [None, None],
                  "text": ["black leather biker jacket", "red heels"], "item_ID": [333, 444]})
    pq.write_table(t, tmp_path / "p" / "data-00000-of-00001.parquet")
    rows = list(iter_source("fashion200k_parquet", tmp_path / "p"))
    assert [(r.rel, r.item_id, r.categories) for r in rows] == [
        ("data-00000-of-00001.parquet#0", "333", ("jackets", "leather jackets")),
        ("data-00000-of-00001.parquet#1", "444", ("shoes",))]
    assert rows[0].read_bytes() == img and rows[1].read_bytes() == b""
    # the contamination index reads the Parquet copy through the same reader (one unreadable row counted)
    index, counts = update_index(tmp_path / "i.parquet", [LegacySource(name="p", kind="fashion200k_parquet",
                                                                       path=tmp_path / "p")])
    assert counts == {"p.indexed": 1, "p.unreadable": 1} and index["item_id"].to_pylist() == ["333"]
    pq.write_table(t.drop(["text"]), tmp_path / "p" / "data-00000-of-00001.parquet")
    with pytest.raises(LegacyFormatError, match="text"):
        list(iter_source("fashion200k_parquet", tmp_path / "p"))


def test_fashion200k_labels_map_to_our_taxonomy():
    ann = CatalogTextAnnotator(TAX)
    lab = label_pool_item(ann, "white cotton blouse", ("top", "tops", "blouses"))
    # taxonomy v2 also reads the shirt's style from "blouse"
    assert lab.category == "shirt" and lab.attributes == {"color": "white", "material": "cotton", "style": "blouse"}
    assert label_pool_item(ann, "blue denim shorts", ("pants",)).category == "shorts"
    # a description naming a category outside the source's category does not override it
    assert label_pool_item(ann, "t-shirt dress in red", ("dress", "dresses")).category == "dress"
    lab = label_pool_item(ann, "black pleated skirt", ("skirt", "skirts", "mini skirts"))
    assert lab.category == "skirt" and lab.attributes["length"] == "mini" and lab.attributes["silhouette"] == "pleated"
    assert label_pool_item(ann, "black leather biker jacket", ("jackets",)).category == "outerwear"
    assert label_pool_item(ann, "red heels", ("shoes",)).category == "shoes"  # the description still names one
    assert label_pool_item(ann, "something", ("lingerie",)).reason == "no_category_match"
    assert agreement("dress", {"color": "red", "pattern": "solid"}, "dress", {"color": "blue"}) == (True, 1, 0, "soft")
    assert agreement("dress", {"color": "red"}, "dress", {"color": "red", "length": "mini"})[3] == "ambiguous"
    assert agreement("dress", {"color": "red"}, "top", {"color": "red"})[3] == "easy"


@pytest.fixture
def scene(tmp_path):
    """Two query items in the store, and a Fashion200K pool (own format + Parquet) with known similarities."""
    store = LocalStore(tmp_path / "store")
    emb = LookupEmbedder()
    a0, a1, b0 = _texture(10, (200, 30, 30)), _texture(11, (190, 40, 40)), _texture(12, (30, 30, 200))
    emb.add(a0, _toward(1.0))
    emb.add(a1, [1.0, 0.1, 0, 0])
    emb.add(b0, [0, 0, 1.0, 0])
    item_bytes = {"a0": _png(a0), "a1": _png(a1), "b0": _png(b0)}
    refs = [ImageRef("product", "A" if k[0] == "a" else "B", int(k[1]), f"mem:{k}", "shop", T0) for k in item_bytes]
    intake = take_in(refs, lambda src: item_bytes[src.removeprefix("mem:")], store)
    window_images = schemas.from_rows(intake.images, schemas.IMAGES)
    sha = {k: hashlib.sha256(v).hexdigest() for k, v in item_bytes.items()}
    items = [QueryItem("A", "dress", {"color": "red", "pattern": "solid"}, [sha["a0"], sha["a1"]]),
             QueryItem("B", "skirt", {"color": "blue", "length": "maxi"}, [sha["b0"]])]

    pics = {
        # a near copy of A's picture (same texture, shifted green): pHash-near, colour-confirmed, in the band
        "near": (_texture(10, (200, 55, 30)), _toward(0.90)),
        "soft": (_texture(20, (30, 30, 190)), _toward(0.85)),
        "soft2": (_texture(21, (30, 30, 180)), _toward(0.80)),  # same pool product as "soft": not chosen too
        "easy": (_texture(22, (200, 30, 30)), _toward(0.75)),
        "ambig": (_texture(23, (200, 30, 30)), _toward(0.70)),
        "far": (_texture(24, (90, 90, 90)), _toward(0.30)),
        "too_close": (_texture(25, (200, 30, 30)), _toward(0.97)),  # above the band: the same product, probably
        "b_soft": (_texture(26, (30, 30, 220)), [0, 0, 0.6, 0.8]),
        "jacket": (_texture(27, (20, 20, 20)), [0, 0.83, 0.55, 0]),
    }
    for im, v in pics.values():
        emb.add(im, v)
    f = tmp_path / "f200k"
    _f200k(f, [
        ("dress", "women/dresses/d/900/900_0.jpeg", "red dress", item_bytes["a0"]),  # A's own bytes
        ("dress", "women/dresses/d/901/901_0.jpeg", "red dress", _png(pics["near"][0])),
        ("dress", "women/dresses/d/902/902_0.jpeg", "blue solid dress", _png(pics["soft"][0])),
        ("dress", "women/dresses/d/902/902_1.jpeg", "blue solid dress", _png(pics["soft2"][0])),
        ("top", "women/tops/t/903/903_0.jpeg", "red solid tee top", _png(pics["easy"][0])),
        ("dress", "women/dresses/d/904/904_0.jpeg", "red dress", _png(pics["ambig"][0])),
        ("dress", "women/dresses/d/905/905_0.jpeg", "grey dress", _png(pics["far"][0])),
        ("dress", "women/dresses/d/906/906_0.jpeg", "red dress", _png(pics["too_close"][0])),
        ("skirt", "women/skirts/s/907/907_0.jpeg", "blue pleated midi skirt", _png(pics["b_soft"][0])),
        ("skirt", "women/skirts/s/908/908_0.jpeg", "missing file", None),
        ("skirt", "women/skirts/s/909/909_0.jpeg", "truncated file", _png(pics["far"][0])[:200]),
    ])
    p = tmp_path / "parquet"
    p.mkdir()
    pq.write_table(pa.table({
        "image": [{"bytes": _png(pics["jacket"][0]), "path": None}, {"bytes": _png(pics["far"][0]), "path": None}],
        "category1": ["jackets", "lingerie"], "category2": [None, None], "category3": [None, None],
        "text": ["black leather jacket", "lace set"], "item_ID": [950, 951]}), p / "data.parquet")
    sources = [LegacySource(name="f200k", kind="fashion200k", path=f),
               LegacySource(name="f200kpq", kind="fashion200k_parquet", path=p)]
    return {"store": store, "emb": emb, "items": items, "window": window_images, "sources": sources,
            "cache_dir": tmp_path / "emb"}


def _mine(scene, **kw):
    mcfg = MiningConfig(band=(0.5, 0.95), per_query=4, candidates=8, **kw)
    cache = EmbeddingCache(scene["cache_dir"], scene["emb"].info())
    return mine(scene["items"], scene["sources"], scene["window"], scene["store"], scene["emb"], cache, TAX, mcfg,
                now=T0)


def test_mining_band_product_dedup_and_kinds(scene):
    res = _mine(scene)
    c = res.counts
    t = res.negatives
    assert t.schema.equals(schemas.NEGATIVES)
    # the pool: 13 read; rejected: A's own bytes, the missing and the truncated file, one category it cannot map
    assert c["pool.in"] == 13 and c["pool.in"] == c["pool.embedded"] + c["pool.rejected"]
    assert c["pool.rejected.exact_duplicate_of_window_image"] == 1
    assert c["pool.rejected.file_not_found"] == 1 and c["pool.rejected.no_category_match"] == 1
    assert c["pool.rejected"] == 4
    rows = {(r["query_item_id"], r["distractor_path"]): r for r in t.to_pylist()}
    a = sorted((r for r in t.to_pylist() if r["query_item_id"] == "A"), key=lambda r: r["rank"])
    # A: the near copy is selected by similarity but dropped by the pHash dedup against the window; "too_close"
    # is above the band, "far" below it; "soft2" is the same pool product as "soft"
    assert [r["distractor_path"].split("/")[-1] for r in a] == ["902_0.jpeg", "903_0.jpeg", "904_0.jpeg"]
    assert [r["rank"] for r in a] == [1, 2, 3]
    assert [r["kind"] for r in a] == ["soft", "easy", "ambiguous"]
    assert [round(r["similarity"], 4) for r in a] == [0.85, 0.75, 0.7]
    assert c["dropped.near_duplicate_of_window_image"] == 1 and c["selected"] == c["kept"] + c["dropped"]
    soft = rows[("A", "women/dresses/d/902/902_0.jpeg")]
    assert (soft["same_category"], soft["shared_attributes"], soft["agreeing_attributes"]) == (True, 2, 1)
    assert soft["distractor_item_id"] == "f200k:902" and soft["distractor_category"] == "dress"
    b = [r for r in t.to_pylist() if r["query_item_id"] == "B"]
    assert [(r["distractor_path"], r["kind"]) for r in b] == [("women/skirts/s/907/907_0.jpeg", "soft"),
                                                               ("data.parquet#0", "easy")]
    assert all(0.5 <= r["similarity"] <= 0.95 for r in t.to_pylist())
    assert c["pairs_by_kind"] == {"soft": 2, "ambiguous": 1, "easy": 2}
    # the kept distractors' originals are in the store (the release publishes them)
    from lookbench_pipeline.store import original_key

    assert all(scene["store"].exists(original_key(s)) for s in t["distractor_sha256"].to_pylist())
    assert len(noise_rows(t)) == 5


def test_mining_rerun_embeds_nothing(scene):
    _mine(scene)
    first = scene["emb"].images
    assert first == 12  # 9 readable, mappable, new pool images and the items' 3 images
    res = _mine(scene)
    assert scene["emb"].images == first and res.negatives.num_rows == 5


def test_same_category_only_and_per_query(scene):
    res = _mine(scene, same_category_only=True)
    assert set(res.negatives["kind"].to_pylist()) <= {"soft", "ambiguous"}
    with pytest.raises(ValueError, match="per_query"):
        MiningConfig(per_query=2, candidates=1)
    with pytest.raises(ValueError, match="band"):
        MiningConfig(band=(0.9, 0.5))


def test_noise_gallery_guards_and_checks(scene):
    neg = _mine(scene).negatives
    img = {r["image_sha256"]: r for r in scene["window"].to_pylist()}
    rows, counts = _noise_gallery(neg, img, [], TAX)
    assert counts == {"in": 5, "rows": 5, "dropped": 0, "dropped_by_reason": {}}
    assert all(r["subset"] == "noise" and r["task"] == "distractor" for r in rows)
    # a distractor that is an image of the window, or whose item is a release item, never reaches the gallery
    first = rows[0]
    rows2, counts2 = _noise_gallery(neg, {**img, first["image_sha256"]: {}}, [{"item_ID": rows[1]["item_ID"]}], TAX)
    assert counts2["dropped_by_reason"] == {"noise_duplicate_of_release_image": 1,
                                            "noise_item_id_is_a_release_item": 1}
    assert counts2["in"] == counts2["rows"] + counts2["dropped"]
    # the blocking check fails when the noise gallery holds a query's image
    for r in rows:
        r["image"] = {"bytes": b"", "path": r["image"]["path"]}
    noise = schemas.from_rows(rows, schemas.RELEASE)
    q = schemas.from_rows([{**rows[0], "subset": "real_studio_flat", "role": "query", "item_ID": "x"}], schemas.RELEASE)
    g = schemas.from_rows([{**rows[1], "subset": "real_studio_flat", "item_ID": "x", "image_sha256": "z" * 64}],
                          schemas.RELEASE)
    rel = ReleaseTables("v1", Window(T0, T0), {("real_studio_flat", "query"): q, ("real_studio_flat", "gallery"): g,
                                               ("noise", "gallery"): noise})
    ok, details = check_candidate(rel)["no_image_in_query_and_gallery"]
    assert not ok and details["images_in_both"] == {"real_studio_flat+noise": 1}


def test_config_section(tmp_path):
    cfg = load_config()
    assert cfg.negatives.sources[0].kind == "fashion200k" and cfg.negatives.model == "baseline/hsv-hog-v1"
    (tmp_path / "c.yaml").write_text("negatives: {band: [0.9, 0.2]}\n")
    from lookbench_pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="band"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text("negatives: {sources: [{name: x, kind: deepfashion2, path: x}]}\n")
    with pytest.raises(ConfigError, match="fashion200k"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text("negatives: {sources: [], per_query: 3}\n")
    assert load_config(tmp_path / "c.yaml").negatives.sources == []


def test_demo_pool_is_skipped_without_the_demo_shop(tmp_path):
    from lookbench_pipeline.pipeline import negatives_provenance, stage_negatives

    (tmp_path / "c.yaml").write_text("sites: []\ndata_dir: data\n")
    assert load_config(tmp_path / "c.yaml").negatives.sources == [], "the demo pool is a default of the demo only"
    (tmp_path / "c.yaml").write_text("sites: []\ndata_dir: data\nnegatives: {sources: [{name: fashion200k-demo, "
                                     "kind: fashion200k, path: legacy/fashion200k-demo, demo: true}]}\n")
    cfg = load_config(tmp_path / "c.yaml")
    empty = {name: schemas.empty(getattr(schemas, name.upper())) for name in
             ("products", "drop_items", "image_refs", "images", "annotations")}
    table, counts = stage_negatives(cfg, **empty, store=LocalStore(tmp_path / "s"), window=Window(T0, T0))
    assert table.num_rows == 0 and counts == {"enabled": False, "skipped_demo_sources": ["fashion200k-demo"]}
    assert negatives_provenance(cfg, table) == {"enabled": False}


def test_soft_negative_hit_rate_and_model_cutoff():
    from datetime import date

    from lookbench_pipeline.evaluate import model_cutoff, noise_hits
    from lookbench_pipeline.metrics import LabelCodes

    # gallery: 2 own items, then 3 noise images (a soft negative, an ambiguous one, an easy one)
    codes = LabelCodes(["dress"] * 4, [{"color": "red"}] * 4,
                       ["dress", "top", "dress", "dress", "top"],
                       [{"color": "red"}, {}, {"color": "blue"}, {"color": "red"}, {"color": "red"}])
    sim = np.array([[0.9, 0, 0.5, 0, 0],     # top-1 an own item
                    [0, 0, 0.9, 0.1, 0],     # top-1 the soft negative
                    [0, 0, 0.1, 0.9, 0],     # top-1 the ambiguous distractor: a distractor, not a soft negative
                    [0, 0, 0.7, 0, 0.7]])    # a tie: the lower column (the soft negative) is the top-1
    hits = noise_hits(sim, codes, 2)
    assert hits["distractor@1"].tolist() == [0, 1, 1, 1] and hits["soft_negative@1"].tolist() == [0, 1, 0, 1]
    assert model_cutoff("srpone/gr-lite") == date(2026, 1, 20)
    assert model_cutoff("baseline/hsv-hog-v1") is None and model_cutoff("some/unknown-model") is None


def test_a_pool_image_that_is_there_but_cannot_be_read_is_told_apart_from_a_missing_one(tmp_path):
    from lookbench_pipeline.contamination import SourceImage
    from lookbench_pipeline.negatives import _pool_record

    src = LegacySource(name="f200k", kind="fashion200k", path=str(tmp_path))
    ann = CatalogTextAnnotator(TAX)

    def reason(path):
        im = SourceImage(path=path, rel="a.jpg", item_id="1", description="white cotton blouse",
                         categories=("top", "tops", "blouses"))
        return _pool_record(src, im, ann, set(), set())[0]

    assert reason(tmp_path / "gone.jpg") == "file_not_found"
    assert reason(tmp_path) == "file_unreadable"  # a folder where a file should be: IsADirectoryError
