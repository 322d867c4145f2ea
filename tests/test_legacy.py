"""Scoring on a legacy benchmark read from its own format (DeepFashion In-shop)."""

import pytest

from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.contamination import LegacyFormatError
from lookbench_pipeline.embed import HsvHogEmbedder
from lookbench_pipeline.legacy import read_inshop, score_inshop


def test_inshop_scoring(tmp_path):
    products, _ = demo_shop.plan(8, 0, 3)
    rows = ["16", "image_name item_id evaluation_status"]
    for n, p in enumerate(products):
        item = f"id_{n:08d}"
        for view, status, im in (("1_front", "gallery", demo_shop.packshot(p)), ("2_side", "query", demo_shop.alt_shot(p))):
            rel = f"img/WOMEN/Tees/{item}/{view}.jpg"
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            im.save(tmp_path / rel)
            rows.append(f"{rel} {item} {status}")
    (tmp_path / "Eval").mkdir()
    (tmp_path / "Eval/list_eval_partition.txt").write_text("\n".join(rows) + "\n")
    q, g = read_inshop(tmp_path)
    assert len(q) == len(g) == 8
    res = score_inshop(tmp_path, HsvHogEmbedder())
    assert res["queries"] == 8 and res["unreadable"] == 0
    assert res["item_recall@20"] == 1.0 and res["item_recall@1"] <= res["item_recall@5"]
    assert res["item_recall@1"] > 1 / 8, "better than chance"
    with pytest.raises(LegacyFormatError):
        read_inshop(tmp_path / "img")


def test_fashion200k_scoring_from_its_own_format(tmp_path):
    from lookbench_pipeline.demo.legacy import write_demo_fashion200k
    from lookbench_pipeline.legacy import read_fashion200k, score_legacy

    info = write_demo_fashion200k(tmp_path, n_items=10, n_single=3)
    labels = sorted(p.name for p in (tmp_path / "labels").iterdir())
    assert any("_test_detect_all.txt" in n for n in labels) and any("_train_" in n for n in labels)
    line = (tmp_path / "labels" / next(n for n in labels if "_test_" in n)).read_text().splitlines()[0]
    path, score, desc = line.split("\t")
    assert path.startswith("women/") and float(score) > 0 and desc
    q, g = read_fashion200k(tmp_path)
    assert len(q) == 10 and len(g) == 10 + 3, "one query per two-image product; the rest is the gallery"
    assert all(p.parts[-2] == item for p, item in q + g), "positives by the product folder"
    assert not {p for p, _ in q} & {p for p, _ in g}
    train = {p for f in (tmp_path / "labels").glob("*_train_*") for p in
             (tmp_path / ln.split("\t")[0] for ln in f.read_text().splitlines())}
    assert train and not train & {p for p, _ in q + g}, "only the test split is scored"
    assert info["images"] == 2 * 10 + 3 + len({p.parent for p in train}) * 2

    # an unreadable image is skipped and counted; its query then has no positive
    victim = next(p for p, _ in g if p.parts[-2] == q[0][1])
    victim.write_bytes(b"not an image")
    res = score_legacy("fashion200k", tmp_path, HsvHogEmbedder())
    assert res["unreadable"] == 1 and res["no_positive"] == 1 and res["queries"] == 9 and res["gallery"] == 12
    hits = res["per_query"]
    assert set(hits) == {"item_recall@1", "item_recall@5", "item_recall@10", "item_recall@20"}
    assert hits["item_recall@1"].mean() <= hits["item_recall@5"].mean() <= hits["item_recall@20"].mean() == 1.0
    assert hits["item_recall@1"].mean() > 1 / 12, "better than chance"


def test_fashion200k_format_errors(tmp_path):
    from lookbench_pipeline.legacy import read_fashion200k, read_legacy

    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "dress_train_detect_all.txt").write_text("women/d/d_x/1/1_0.jpeg\t0.9\tred dress\n")
    with pytest.raises(LegacyFormatError, match="test_detect_all"):
        read_fashion200k(tmp_path)
    (tmp_path / "labels" / "dress_test_detect_all.txt").write_text("only-one-field\n")
    with pytest.raises(LegacyFormatError, match="path<TAB>score<TAB>description"):
        read_fashion200k(tmp_path)
    (tmp_path / "labels" / "dress_test_detect_all.txt").write_text("flat.jpeg\t0.9\tred dress\n")
    with pytest.raises(LegacyFormatError, match="product folder"):
        read_fashion200k(tmp_path)
    with pytest.raises(ValueError, match="deepfashion2"):
        read_legacy("deepfashion2", tmp_path)


def test_the_demo_writers_old_names_still_work_with_a_deprecation_warning():
    """The demo trees' writers moved to lookbench_pipeline.demo.legacy; for one release the old names in
    lookbench_pipeline.legacy hand them back with a DeprecationWarning (resolved at first use: the module itself
    imports nothing of the demo)."""
    import lookbench_pipeline.legacy as legacy
    from lookbench_pipeline.demo import legacy as demo_legacy

    for name in ("write_demo_inshop", "write_demo_fashion200k"):
        with pytest.warns(DeprecationWarning, match="lookbench_pipeline.demo.legacy"):
            assert getattr(legacy, name) is getattr(demo_legacy, name)
    with pytest.raises(AttributeError):
        legacy.write_demo_nothing
