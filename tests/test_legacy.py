"""Scoring on a legacy benchmark read from its own format (DeepFashion In-shop)."""

import pytest

from lookbench_pipeline import demo_shop
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
