"""Garment detection without a model: boxes, matching, annotation formats (the real files in
../shared/realdata/annotations), the YOLO data set, weights resolution and configuration."""

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from lookbench_pipeline.config import ConfigError, load_config
from lookbench_pipeline.detect import (AnnotationSource, DetectorError, Drop, Kept, LinkedItem, Unlabelled,
                                       build_yolo_dataset, clip_box, match_items, read_annotations, resolve_weights,
                                       rle_counts, segmentation_box, transpose_box, validate_class_map)


def test_clip_box_keeps_clips_and_drops_with_reasons():
    assert clip_box([10, 20, 110, 220], 640, 800, 16) == ([10.0, 20.0, 110.0, 220.0], None)
    assert clip_box([-5, -7, 50, 60], 640, 800, 16) == ([0.0, 0.0, 50.0, 60.0], None)
    assert clip_box([600, 700, 900, 1000], 640, 800, 16) == ([600.0, 700.0, 640.0, 800.0], None)
    assert clip_box([10, 10, 10, 50], 640, 800, 16) == (None, Drop.DEGENERATE)
    assert clip_box([float("nan"), 0, 5, 5], 640, 800, 16) == (None, Drop.DEGENERATE)
    assert clip_box([700, 10, 800, 50], 640, 800, 16) == (None, Drop.OUTSIDE)
    assert clip_box([10, 10, 20, 200], 640, 800, 16) == (None, Drop.TOO_SMALL)
    assert clip_box([630, 10, 700, 200], 640, 800, 16) == (None, Drop.TOO_SMALL)  # 10 px wide once clipped


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_match_items_by_category_then_visual_similarity():
    red, blue, grey = _unit([1, 0, 0]), _unit([0, 1, 0]), _unit([0.6, 0.8, 0])
    linked = [LinkedItem("top-1", "top", grey), LinkedItem("bag-red", "bag", red), LinkedItem("bag-blue", "bag", blue)]
    dets = [Kept(0, ["top", "shirt"], 0.9, _unit([0, 0, 1])),  # the only top: matched by category alone
            Kept(1, ["bag"], 0.8, _unit([0.1, 0.99, 0])),  # bluish bag
            Kept(2, ["bag"], 0.7, _unit([0.99, 0.1, 0])),  # reddish bag
            Kept(3, ["shoes"], 0.6, red),  # no linked shoes
            Kept(4, ["bag"], 0.5, _unit([0.7, 0.7, 0]))]  # a third bag: both bags already taken
    m = match_items(dets, linked)
    assert m[0][0] == "top-1" and m[0][1] == pytest.approx(0.0, abs=1e-6)
    assert m[1][0] == "bag-blue" and m[2][0] == "bag-red"
    assert m[3] == (None, None, Unlabelled.NO_CATEGORY)
    assert m[4][0] is None and m[4][2] == Unlabelled.TAKEN
    assert match_items(dets[:1], [])[0] == (None, None, Unlabelled.NO_LINKED_ITEM)
    assert match_items(dets[1:2], linked, min_similarity=0.999)[1][2] == Unlabelled.DISSIMILAR
    # deterministic whatever the input order
    assert match_items(list(reversed(dets)), list(reversed(linked))) == m


def _rle_string(counts):
    """pycocotools rleToString (the inverse of detect.rle_counts), for the test."""
    out = []
    for i, c in enumerate(counts):
        x = c - counts[i - 2] if i > 2 else c
        more = True
        while more:
            ch = x & 0x1F
            x >>= 5
            more = not ((x == 0 and not ch & 0x10) or (x == -1 and ch & 0x10))
            if more:
                ch |= 0x20
            out.append(chr(ch + 48))
    return "".join(out)


def test_segmentation_boxes_from_polygons_and_rle():
    assert segmentation_box([[10, 20, 30, 5, 50, 40], [60, 61, 62, 63]]) == [10.0, 5.0, 62.0, 63.0]
    assert segmentation_box("[[1, 2, 3, 4, 5, 6]]") == [1.0, 2.0, 5.0, 6.0]  # stored as a string
    mask = np.zeros((40, 30), dtype=np.uint8)
    mask[7:19, 4:12] = 1
    mask[30, 25] = 1
    flat = mask.T.ravel()  # column-major, as COCO
    counts, cur, n = [], 0, 0
    for v in flat:
        if v != cur:
            counts.append(n)
            cur, n = v, 0
        n += 1
    counts.append(n)
    assert segmentation_box({"size": [40, 30], "counts": counts}) == [4.0, 7.0, 26.0, 31.0]
    assert rle_counts(_rle_string(counts)) == counts
    assert segmentation_box({"size": [40, 30], "counts": _rle_string(counts)}) == [4.0, 7.0, 26.0, 31.0]
    wrap = [35, 10, 1155]  # a run from the bottom of column 0 into the top of column 1
    assert segmentation_box({"size": [40, 30], "counts": wrap}) == [0.0, 0.0, 2.0, 40.0]
    big = [2**32 - 1, 1, 0, 2**32 - 1]  # the widest counts and differences pycocotools writes (7 characters)
    assert max(len(_rle_string([c])) for c in (2**32 - 1, -(2**32 - 1))) == 7
    assert rle_counts(_rle_string(big)) == big


def test_a_hostile_rle_string_is_refused_in_linear_time():
    """A count of 100,000 continuation characters would build an ever longer integer (quadratic time): refused at
    the 8th character, and the annotation that carries it has no box (a recorded drop, not a hang)."""
    from lookbench_pipeline.coco import annotation_box

    hostile = "o" * 100_000 + "0"  # 'o' - 48 = 0x3F: continuation bit set
    with pytest.raises(ValueError, match="longer than 7"):
        rle_counts(hostile)
    assert annotation_box({"segmentation": {"size": [40, 30], "counts": hostile}}) is None
    with pytest.raises(IndexError):
        rle_counts("o")  # ends inside a count


def test_transpose_box_follows_exif_orientation():
    im = Image.new("RGB", (40, 30))
    im.paste((255, 0, 0), (5, 3, 15, 9))  # a box on the stored pixels
    for o in range(1, 9):
        from PIL import ImageOps

        exif = Image.Exif()
        exif[0x0112] = o
        shown = ImageOps.exif_transpose(_with_exif(im, exif))
        red = np.argwhere(np.asarray(shown)[..., 0] > 200)
        y1, x1 = red.min(axis=0)
        y2, x2 = red.max(axis=0) + 1
        assert transpose_box([5, 3, 15, 9], o, (40, 30)) == [x1, y1, x2, y2], o


def _with_exif(im, exif):
    import io

    buf = io.BytesIO()
    im.save(buf, format="PNG", exif=exif)
    return Image.open(io.BytesIO(buf.getvalue()))


def test_real_annotation_files_convert_to_a_yolo_dataset(realdata, tmp_path):
    """Fashionpedia (polygons only, ids from 0), DeepFashion2 as COCO (mmpose) and ModaNet snaps (no image files
    here): boxes derived and normalised, missing images recorded, counts reconcile, the split is stable."""
    ann, street = realdata / "annotations", realdata / "images/street"
    fp = AnnotationSource(ann / "fashionpedia_sample.json", street, "street_fashionpedia_{file_name}")
    df2 = AnnotationSource(ann / "mmpose_deepfashion2_coco.json", street, "street_mmpose_deepfasion2_{file_name}")
    mn = AnnotationSource(ann / "modanet_tiny_snaps_test.json", street, "{image_id}.jpg")
    images, rejected, order = read_annotations(fp)
    assert len(images) == 2 and sum(len(i.boxes) for i in images) == 12 and not rejected
    assert order[0] == "shirt, blouse" and len(order) == 48
    raw = json.loads((ann / "fashionpedia_sample.json").read_text())
    a = raw["annotations"][0]
    xs, ys = a["segmentation"][0][0::2], a["segmentation"][0][1::2]
    im9813 = next(i for i in images if i.key.endswith("#9813"))
    assert im9813.boxes[0] == ("shoe", [min(xs), min(ys), max(xs), max(ys)])
    images, rejected, _ = read_annotations(mn)
    assert len(images) == 10 and sum(len(i.boxes) for i in images) == 38
    assert {c for i in images for c, _ in i.boxes} <= {"bag", "belt", "boots", "footwear", "outer", "dress",
                                                      "sunglasses", "pants", "top", "shorts", "skirt", "headwear",
                                                      "scarf & tie"}

    class_map = {"shirt, blouse": "upper", "top, t-shirt, sweatshirt": "upper", "pants": "lower", "dress": "dress",
                 "long_sleeved_dress": "dress", "shoe": "shoes", "footwear": "shoes", "top": "upper"}
    ds = build_yolo_dataset([fp, df2, mn], tmp_path / "ds", class_map, val_fraction=0.3, seed=0)
    assert ds.classes == ["upper", "lower", "dress", "shoes"]
    c = ds.counts
    assert c["images_in"] == 14 and c["rejected_by_reason"]["image_missing"] == 10
    assert c["boxes_in"] == c["boxes"] + c["boxes_dropped"] and c["boxes"] == 7  # 2 shoes, dress, pants, shirt, 2 DF2 dresses
    assert c["train_images"] + c["val_images"] == 4 and c["train_images"] >= 1 and c["val_images"] >= 1
    assert {r["reason"].split(":")[0] for r in ds.rejected} == {"image_missing", "class_not_kept"}
    names = yaml.safe_load(ds.data_yaml.read_text())["names"]
    assert names == {0: "upper", 1: "lower", 2: "dress", 3: "shoes"}
    lines = [ln.split() for f in (tmp_path / "ds/labels").rglob("*.txt") for ln in f.read_text().splitlines()]
    assert len(lines) == 7 and all(0 <= float(v) <= 1 for ln in lines for v in ln[1:])
    df2_label = next((tmp_path / "ds/labels").rglob("*000264.txt")).read_text().split()
    # DeepFashion2 000264: bbox [103, 80, 601, 669] (x, y, w, h) on 750 x 750
    assert [float(v) for v in df2_label[1:]] == pytest.approx([(103 + 601 / 2) / 750, (80 + 669 / 2) / 750,
                                                               601 / 750, 669 / 750], abs=1e-5)
    again = build_yolo_dataset([fp, df2, mn], tmp_path / "ds2", class_map, val_fraction=0.3, seed=0)
    assert again.sha256 == ds.sha256
    assert sorted(p.name for p in (tmp_path / "ds/images/val").iterdir()) == sorted(
        p.name for p in (tmp_path / "ds2/images/val").iterdir())
    # the same files in another folder: the same split and the same data set, byte for byte (a detector trained on
    # a copy, e.g. the demo detector retrained by a rebuild into an empty data_dir, sees the same data)
    moved = tmp_path / "elsewhere" / "annotations"
    moved.mkdir(parents=True)
    for src in (fp, df2, mn):
        shutil.copy(src.annotations, moved / src.annotations.name)
    copies = [AnnotationSource(moved / s.annotations.name, s.images, s.image_name) for s in (fp, df2, mn)]
    elsewhere = build_yolo_dataset(copies, tmp_path / "ds3", class_map, val_fraction=0.3, seed=0)
    assert elsewhere.sha256 == ds.sha256 and elsewhere.counts == ds.counts


def test_modanet_ids_are_the_category_list_numbered_from_one(realdata):
    from lookbench_pipeline.detect import MODANET_CATEGORIES

    rows = [ln.split("\t") for ln in (realdata / "annotations/modanet_categories.tsv").read_text().splitlines()[1:]]
    tsv = {int(i): name for i, name in rows}
    assert len(tsv) == len(MODANET_CATEGORIES) == 13
    for cid, name in MODANET_CATEGORIES.items():
        if name != "outer":  # the raw file spells it out: coat/jacket/suit/...
            assert name.split()[0] in tsv[cid - 1], (cid, name, tsv[cid - 1])


def test_deepfashion2_folder_and_exif_rotated_images(tmp_path):
    """DeepFashion2's own per-image files ([x1, y1, x2, y2]); an EXIF-rotated image's boxes follow the rotation."""
    (tmp_path / "annos").mkdir()
    (tmp_path / "image").mkdir()
    im = Image.new("RGB", (200, 100), (255, 255, 255))
    im.paste((200, 0, 0), (20, 10, 60, 50))
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise: 100 x 200
    im.save(tmp_path / "image/000001.jpg", exif=exif)
    Image.new("RGB", (120, 90), (90, 90, 90)).save(tmp_path / "image/000002.jpg")
    (tmp_path / "annos/000001.json").write_text(json.dumps({
        "source": "user", "pair_id": 1,
        "item1": {"category_id": 1, "category_name": "short sleeve top", "bounding_box": [20, 10, 60, 50]},
        "item2": {"category_id": 99, "bounding_box": [0, 0, 5, 5]}}))
    (tmp_path / "annos/000002.json").write_text(json.dumps({"item1": {"category_id": 8, "bounding_box": [10, 10, 80, 80]}}))
    src = AnnotationSource(tmp_path / "annos", tmp_path / "image")
    images, rejected, order = read_annotations(src)
    assert order[0] == "short sleeve top" and len(order) == 13
    assert [r["reason"] for r in rejected] == ["unknown_category"]
    ds = build_yolo_dataset([src], tmp_path / "ds", None, val_fraction=0.5)
    assert ds.classes == ["short sleeve top", "trousers"]
    label = next((tmp_path / "ds/labels").rglob("*000001.txt")).read_text().split()
    # stored box x 20..60, y 10..50 on 200 x 100; shown (rotated clockwise) on 100 x 200: x 50..90, y 20..60
    assert [float(v) for v in label[1:]] == pytest.approx([70 / 100, 40 / 200, 40 / 100, 40 / 200], abs=1e-5)
    written = Image.open(next((tmp_path / "ds/images").rglob("*000001.jpg")))
    assert written.size == (100, 200) and not written.getexif().get(0x0112)


def test_bad_annotation_input_is_named(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(DetectorError, match="not a readable JSON"):
        read_annotations(AnnotationSource(tmp_path / "x.json", tmp_path))
    (tmp_path / "x.json").write_text("[" * 100000 + "]" * 100000)  # nested too deep: was a RecursionError
    with pytest.raises(DetectorError, match="not a readable JSON"):
        read_annotations(AnnotationSource(tmp_path / "x.json", tmp_path))
    (tmp_path / "y.json").write_text(json.dumps({"foo": 1}))
    with pytest.raises(DetectorError, match="not a COCO-style file"):
        read_annotations(AnnotationSource(tmp_path / "y.json", tmp_path))
    (tmp_path / "z.json").write_text(json.dumps({"images": [{"id": 1, "file_name": "nope.jpg"}],
                                                "annotations": [{"id": 1, "image_id": 1, "category_id": 1,
                                                                 "bbox": [0, 0, 5, 5]}],
                                                "categories": [{"id": 1, "name": "dress"}]}))
    with pytest.raises(DetectorError, match=r"no annotated image could be read \(rejections by reason: "
                                            r"\{'image_missing': 1\}\)"):
        build_yolo_dataset([AnnotationSource(tmp_path / "z.json", tmp_path)], tmp_path / "ds")
    with pytest.raises(DetectorError, match="images folder .*nowhere .*is not a folder"):
        build_yolo_dataset([AnnotationSource(tmp_path / "z.json", tmp_path / "nowhere")], tmp_path / "ds")


def test_an_annotation_file_may_start_with_a_byte_order_mark(tmp_path):
    # as the label import and the items sheets: an editor's UTF-8 BOM was "not a readable JSON annotation file"
    (tmp_path / "annos").mkdir()
    (tmp_path / "a.json").write_text("\ufeff" + json.dumps({
        "images": [{"id": 1, "file_name": "1.jpg"}], "categories": [{"id": 1, "name": "dress"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5]}]}), encoding="utf-8")
    (tmp_path / "annos/000001.json").write_text("\ufeff" + json.dumps(
        {"item1": {"category_id": 1, "bounding_box": [0, 0, 5, 5]}}), encoding="utf-8")
    for src in (AnnotationSource(tmp_path / "a.json", tmp_path), AnnotationSource(tmp_path / "annos", tmp_path)):
        images, rejected, _ = read_annotations(src)
        assert len(images) == 1 and rejected == []


def _coco_file(tmp_path, name="a.json", **changes) -> AnnotationSource:
    """One 100 x 80 image with a 20 x 20 dress box; ``changes``: a function per list to change the file."""
    data = {"images": [{"id": 1, "file_name": "1.jpg", "width": 100, "height": 80}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]}],
            "categories": [{"id": 1, "name": "dress"}]}
    for key, change in changes.items():
        change(data[key]) if key in data else change(data)
    (tmp_path / name).write_text(json.dumps(data))
    return AnnotationSource(tmp_path / name, tmp_path)


def _reconciles(path, images, rejected):
    """Every annotation of the file is a kept box or a rejection row."""
    data = json.loads(Path(path).read_text())
    entries = len(data["annotations"]) if isinstance(data, dict) else sum(len(s.get("items") or []) for s in data)
    assert entries == sum(len(i.boxes) for i in images) + len(rejected), (entries, images, rejected)


@pytest.mark.parametrize("change,match", [
    # a list or an object is no id (it was a TypeError, unhashable): the file and the entry are named
    (dict(images=lambda ims: ims[0].update(id=[1])), r"images\[0\]: 'id' must be a number or a string, not \[1\]"),
    (dict(annotations=lambda anns: anns[0].update(image_id={"a": 1})),
     r"annotations\[0\] \(id 1\): 'image_id' must be a number or a string, not \{'a': 1\}"),
    (dict(annotations=lambda anns: anns[0].update(category_id=[1])),
     r"annotations\[0\] \(id 1\): 'category_id' must be a number or a string"),
    # a later entry of the same id silently won (its file took the first one's labels)
    (dict(images=lambda ims: ims.append({"id": 1, "file_name": "other.jpg"})),
     r"images\[1\] \('other.jpg'\) and images\[0\] \('1.jpg'\) both have id 1"),
    # a category without an id or a name was a KeyError
    (dict(categories=lambda cs: cs.append({"name": "hat"})), r"categories\[1\] needs an integer 'id' and a 'name'"),
    (dict(categories=lambda cs: cs.append({"id": 2})), r"categories\[1\] needs an integer 'id' and a 'name'"),
    (dict(categories=lambda cs: cs.append([2, "hat"])), r"categories\[1\] needs an integer 'id' and a 'name'"),
    (dict(images=lambda ims: ims.append(5)), r"images\[1\] has no 'id'"),
    (dict(annotations=lambda anns: anns.append("x")), r"annotations\[1\] \(id None\) needs 'image_id' and"),
    (dict(annotations=lambda anns: anns.append({"id": 2, "image_id": 1})), r"annotations\[1\] \(id 2\) needs"),
    (dict(top=lambda d: d.update(images={"1": {}})), r"not a COCO-style annotation file"),
    (dict(top=lambda d: d.update(categories={"1": "dress"})), r"no 'categories' list"),
])
def test_a_structurally_broken_coco_file_is_refused_naming_the_file_and_entry(tmp_path, change, match):
    src = _coco_file(tmp_path, **change)
    with pytest.raises(DetectorError, match=re.escape(str(src.annotations)) + ": " + match):
        read_annotations(src)


def test_hostile_coco_values_are_recorded_never_an_exception(tmp_path):
    """As the label import reads them (lookbench_pipeline.coco): a box that is no four finite numbers is no box
    (float() raised), a size that is no size unknown (int() raised on inf / NaN / a word), a box clipped to its
    image and one wholly outside it rejected ``box_outside_image`` (it was kept as given); counts reconcile."""
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": ["a", 1, 2, 3]},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [None, 1, 2, 3]},
            {"id": 3, "image_id": 1, "category_id": 1, "bbox": [1e999, 1, 2, 3]},
            {"id": 4, "image_id": 1, "category_id": 1, "bbox": [1, 1, 0, 3]},
            {"id": 5, "image_id": 1, "category_id": 1, "segmentation": {"size": "x", "counts": [1]}},
            {"id": 6, "image_id": 1, "category_id": 1, "bbox": [500, 500, 20, 20]},
            {"id": 7, "image_id": 1, "category_id": 1, "bbox": [90, 70, 20, 20]},
            {"id": 8, "image_id": "1", "category_id": "1", "bbox": "[10, 10, 20, 20]"},
            {"id": 9, "image_id": 2, "category_id": 1, "bbox": [500, 500, 20, 20]},  # size unknown: kept
            {"id": 10, "image_id": 3, "category_id": 1, "bbox": [1, 1, 2, 2]},
            {"id": 11, "image_id": 1, "category_id": 7, "bbox": [1, 1, 2, 2]},
            {"id": 12, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2], "iscrowd": 1}]
    sizes = [1e999, float("nan"), "wide", True, 0, -5, None]
    src = _coco_file(tmp_path, images=lambda ims: ims.extend(
        [{"id": 1, "file_name": "1.jpg", "width": 100, "height": 80}]  # the same image twice: read once
        + [{"id": 2 + k, "file_name": f"{2 + k}.jpg", "width": w, "height": 50} for k, w in enumerate(sizes)]),
        annotations=lambda a: a.extend(anns))
    images, rejected, order = read_annotations(src)
    assert order == ["dress"] and len(images) == 1 + len(sizes)
    one = next(i for i in images if i.ident == "1")
    assert one.size == (100, 80) and one.path == tmp_path / "1.jpg"
    assert one.boxes == [("dress", [10.0, 10.0, 30.0, 30.0]), ("dress", [90.0, 70.0, 100.0, 80.0]),
                         ("dress", [10.0, 10.0, 30.0, 30.0])]
    assert all(i.size is None for i in images if i.ident != "1")
    assert next(i for i in images if i.ident == "2").boxes == [("dress", [500.0, 500.0, 520.0, 520.0])]
    assert {r["id"]: r["reason"] for r in rejected} == {
        1: "no_box", 2: "no_box", 3: "no_box", 4: "no_box", 5: "no_box", 6: "box_outside_image",
        11: "unknown_category", 12: "crowd"}
    _reconciles(src.annotations, images, rejected)


def test_a_box_outside_its_image_is_rejected_in_the_data_set_counts(tmp_path):
    src = _two_dresses(tmp_path)
    data = json.loads(src.annotations.read_text())
    for im in data["images"]:
        im.update(width=80, height=60)
    data["annotations"].append({"id": 3, "image_id": 2, "category_id": 1, "bbox": [200, 10, 40, 30]})
    src.annotations.write_text(json.dumps(data))
    ds = build_yolo_dataset([src], tmp_path / "ds", None, val_fraction=0.5)
    assert ds.counts["boxes"] == 2 and ds.counts["rejected_by_reason"] == {"box_outside_image": 1}
    assert [r["id"] for r in ds.rejected] == [3]


def test_hostile_modanet_snaps_and_deepfashion2_files(tmp_path):
    snaps = [{"image_id": 5, "items": [{"category_id": 6, "bbox": [1, 1, 10, 10]},
                                       {"category_id": 6, "bbox": ["a", 1, 10, 10]},
                                       {"category_id": "6", "bbox": [1, 1, 1e999, 10]},
                                       {"category_id": 6, "bbox": [1, 1, 10, 10], "iscrowd": "1"},
                                       {"category_id": 99, "bbox": [1, 1, 10, 10]}]},
             {"image_id": "6", "snap_url": ["x"]}]
    (tmp_path / "s.json").write_text(json.dumps(snaps))
    src = AnnotationSource(tmp_path / "s.json", tmp_path, "{image_id}.jpg")
    images, rejected, _ = read_annotations(src)
    assert [(i.ident, i.boxes) for i in images] == [("5", [("dress", [1.0, 1.0, 11.0, 11.0])]), ("6", [])]
    assert [r["reason"] for r in rejected] == ["no_box", "no_box", "crowd", "unknown_category"]
    _reconciles(src.annotations, images, rejected)
    for bad, match in (([{"image_id": [5], "items": []}], r"\[0\] is not a ModaNet snap"),
                       ([{"image_id": 5, "items": {"a": 1}}], r"\[0\] is not a ModaNet snap"),
                       ([{"image_id": 5, "items": []}, {"image_id": "5", "items": []}],
                        r"\[1\] and \[0\] both describe image '5'"),
                       ([{"image_id": 5, "items": [{"category_id": [6]}]}],
                        r"image 5 item 0: no 'category_id' that is a number or a string"),
                       ([{"image_id": 5, "items": ["top"]}], r"image 5 item 0: no 'category_id'")):
        (tmp_path / "s.json").write_text(json.dumps(bad))
        with pytest.raises(DetectorError, match=match):
            read_annotations(AnnotationSource(tmp_path / "s.json", tmp_path, "{image_id}.jpg", "modanet-snaps"))
    (tmp_path / "annos").mkdir()
    (tmp_path / "annos/000001.json").write_text(json.dumps({
        "item1": {"category_id": 1, "bounding_box": ["a", 0, 5, 5]}, "item2": {"category_id": 1,
                                                                            "bounding_box": [5, 5, 1, 1]},
        "item3": {"category_id": 1, "bounding_box": "[1, 2, 5, 6]"}}))
    images, rejected, _ = read_annotations(AnnotationSource(tmp_path / "annos", tmp_path))
    assert images[0].boxes == [("short sleeve top", [1.0, 2.0, 5.0, 6.0])]
    assert [(r["id"], r["reason"]) for r in rejected] == [("item1", "no_box"), ("item2", "no_box")]
    for bad, match in (([1, 2], "not a DeepFashion2 annotation file"), ({"item1": "top"}, "item1: not an item"),
                       ({"item1": {"category_id": [1]}}, "item1: not an item with a 'category_id'")):
        (tmp_path / "annos/000001.json").write_text(json.dumps(bad))
        with pytest.raises(DetectorError, match=match):
            read_annotations(AnnotationSource(tmp_path / "annos", tmp_path))


def test_detector_train_reports_a_broken_annotation_file_in_one_line(tmp_path, capsys):
    from lookbench_pipeline.cli import main

    src = _coco_file(tmp_path, images=lambda ims: ims[0].update(id=[1]))
    rc = main(["detector", "train", "--annotations", str(src.annotations), "--images", str(tmp_path), "--out",
               str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and err == f"error: {src.annotations}: images[0]: 'id' must be a number or a string, not [1]\n"


def _two_dresses(tmp_path) -> AnnotationSource:
    for n in (1, 2):
        Image.new("RGB", (80, 60), (200, 30 * n, 0)).save(tmp_path / f"{n}.jpg")
    (tmp_path / "a.json").write_text(json.dumps({
        "images": [{"id": n, "file_name": f"{n}.jpg"} for n in (1, 2)],
        "annotations": [{"id": n, "image_id": n, "category_id": 1, "bbox": [10, 10, 40, 30]} for n in (1, 2)],
        "categories": [{"id": 1, "name": "dress"}, {"id": 2, "name": "short sleeve top"}]}))
    return AnnotationSource(tmp_path / "a.json", tmp_path)


def test_training_class_map_names_one_class_per_category_and_unmatched_categories(tmp_path, caplog):
    src = _two_dresses(tmp_path)
    with pytest.raises(DetectorError, match=r"category 'short sleeve top' maps to \[1, 2\] \(list\); each annotation "
                                            r"category maps to ONE detector class.*unlike detect.classes"):
        build_yolo_dataset([src], tmp_path / "ds", {"dress": "dress", "short sleeve top": [1, 2]})
    # a category of the map that no annotation has: warned, recorded; its class has no box
    ds = build_yolo_dataset([src], tmp_path / "ds", {"dress": "dress", "short sleeve top": "upper", "hat": "hat"})
    assert ds.classes == ["dress", "upper", "hat"]
    assert ds.unmatched_class_map_keys == ["short sleeve top", "hat"]  # declared in the file but never annotated
    assert ds.classes_without_boxes == ["upper", "hat"]
    assert "short sleeve top" in caplog.text and "classes without any box" in caplog.text
    with pytest.raises(DetectorError, match=r"no category of the class map occurs in the annotation files: the map's "
                                            r"categories \['Dress', 'hat'\], the files' categories \['dress'\]"):
        build_yolo_dataset([src], tmp_path / "ds", {"Dress": "dress", "hat": "hat", "belt": None})


@pytest.mark.parametrize("extra,match,code", [
    # bad option values are usage errors (exit code 2, README.md), refused by the argument parser
    (["--epochs", "0"], "argument --epochs: must be an integer >= 1, got 0", 2),
    (["--epochs", "two"], "argument --epochs: 'two' is not an integer >= 1", 2),
    (["--imgsz", "0"], "argument --imgsz: must be an integer >= 32 (pixels), got 0", 2),
    (["--batch", "-1"], "argument --batch: must be an integer >= 1, got -1", 2),
    (["--val-fraction", "0"], "argument --val-fraction: must be a number between 0 and 1 (exclusive), got 0", 2),
    (["--val-fraction", "1.5"], "argument --val-fraction: must be a number between 0 and 1 (exclusive), got 1.5", 2),
    (["--images", "/nonexistent"], "argument --images: /nonexistent: no such folder", 2),
    (["--classes", "/nonexistent.yaml"], "argument --classes: /nonexistent.yaml: no such file", 2),
    (["--classes", "/"], "argument --classes: /: no such file (a folder)", 2),
    (["--annotations", "/nonexistent.json"], "argument --annotations: /nonexistent.json: no such file or folder", 2),
    (["--classes", "LIST"], "category 'short sleeve top' maps to [1, 2] (list); each annotation category maps to ONE",
     1),
])
def test_detector_train_cli_refuses_bad_arguments(tmp_path, capsys, extra, match, code):
    from lookbench_pipeline.cli import main

    src = _two_dresses(tmp_path)
    (tmp_path / "classes.yaml").write_text("dress: dress\nshort sleeve top: [1, 2]\n")
    extra = [str(tmp_path / "classes.yaml") if e == "LIST" else e for e in extra]
    images = [] if "--images" in extra else ["--images", str(tmp_path)]
    try:
        rc = main(["detector", "train", "--annotations", str(src.annotations), *images, "--out",
                   str(tmp_path / "out"), *extra])
    except SystemExit as exc:  # the argument parser's usage error
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == code and match in err and "Counter(" not in err and "Traceback" not in err, err
    assert err.startswith("error: " if code == 1 else "usage: "), err
    assert not (tmp_path / "out").exists(), "refused before anything is written"


def test_class_map_is_checked_against_the_model_and_the_taxonomy():
    cats = {"top", "shirt", "dress", "bag"}
    assert validate_class_map(["dress", "bag"], {}, cats) == {"dress": ["dress"], "bag": ["bag"]}
    assert validate_class_map(["upper", "hat"], {"upper": ["top", "shirt"], "hat": []}, cats) == {
        "upper": ["top", "shirt"], "hat": []}
    with pytest.raises(DetectorError, match="not taxonomy categories"):
        validate_class_map(["short_sleeved_shirt"], {}, cats)
    with pytest.raises(DetectorError, match=r"not mapped \['hat'\]"):
        validate_class_map(["upper", "hat"], {"upper": ["top"]}, cats)
    with pytest.raises(DetectorError, match=r"does not have \['uper'\]"):
        validate_class_map(["upper"], {"upper": ["top"], "uper": ["top"]}, cats)
    with pytest.raises(DetectorError, match="not in the taxonomy"):
        validate_class_map(["upper"], {"upper": ["tops"]}, cats)


def test_detect_config_is_strict_and_checked_against_the_taxonomy(tmp_path, monkeypatch):
    monkeypatch.delenv("LOOKBENCH_DETECT__CACHE_DIR", raising=False)

    def cfg(detect):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data_dir": "data", "detect": detect}))
        return load_config(tmp_path / "c.yaml")

    c = cfg({"classes": {"short_sleeved_shirt": ["top", "shirt"], "long_sleeved_dress": "dress", "hat": None},
             "conf": 0.3})
    assert c.detect.classes == {"short_sleeved_shirt": ["top", "shirt"], "long_sleeved_dress": ["dress"], "hat": []}
    assert c.detector_cache_dir == (tmp_path / "data" / "detector").resolve()
    assert cfg({"cache_dir": "cache"}).detector_cache_dir == tmp_path / "cache"
    with pytest.raises(ConfigError, match="not in the taxonomy"):
        cfg({"classes": {"x": ["jumper-dress"]}})
    with pytest.raises(ConfigError, match="bogus"):
        cfg({"bogus": 1})
    with pytest.raises(ConfigError, match="conf"):
        cfg({"conf": 1.5})
    (tmp_path / "w.pt").write_bytes(b"x")
    assert cfg({"weights": "w.pt"}).detect.weights == str(tmp_path / "w.pt")
    assert cfg({"weights": "someone/deepfashion2-yolo"}).detect.weights == "someone/deepfashion2-yolo"


def test_weights_by_path_or_hugging_face_id_offline(tmp_path, monkeypatch):
    (tmp_path / "best.pt").write_bytes(b"weights")
    assert resolve_weights(str(tmp_path / "best.pt")) == tmp_path / "best.pt"
    with pytest.raises(DetectorError, match="no such file"):
        resolve_weights(str(tmp_path / "missing.pt"))
    # a Hugging Face cache laid out as huggingface_hub writes it; offline, only the cache is read
    hub = tmp_path / "hf"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = hub / "models--someone--df2-yolo" / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "df2.pt").write_bytes(b"weights")
    (hub / "models--someone--df2-yolo" / "refs").mkdir()
    (hub / "models--someone--df2-yolo" / "refs" / "main").write_text(commit)
    assert resolve_weights("someone/df2-yolo", weights_file="df2.pt").read_bytes() == b"weights"
    assert resolve_weights("someone/df2-yolo").name == "df2.pt"
    with pytest.raises(DetectorError, match="not in the local Hugging Face cache"):
        resolve_weights("someone/other-model", weights_file="best.pt")


def test_moved_names_still_import_with_a_deprecation_warning():
    """For one release: ``lookbench_pipeline.person_regions`` hands back ``detect.person_regions`` itself, and the
    demo detector's names, now in ``lookbench_pipeline.demo.detector``, are still found on ``detect``; both warn.
    Importing the detect package loads nothing of the demo package."""
    import importlib
    import subprocess
    import sys
    import warnings

    from lookbench_pipeline.demo import detector as demo_detector
    from lookbench_pipeline.detect import person_regions

    sys.modules.pop("lookbench_pipeline.person_regions", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert importlib.import_module("lookbench_pipeline.person_regions") is person_regions
        from lookbench_pipeline.detect import DEMO_CLASSES, DEMO_RECIPE, demo_detector as train_demo
    assert (train_demo, DEMO_CLASSES, DEMO_RECIPE) == (demo_detector.demo_detector, demo_detector.DEMO_CLASSES,
                                                      demo_detector.DEMO_RECIPE)
    moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any("lookbench_pipeline.detect.person_regions" in m for m in moved)
    assert all(any(f"detect.{n} moved to lookbench_pipeline.demo.detector" in m for m in moved)
               for n in ("DEMO_CLASSES", "DEMO_RECIPE", "demo_detector"))
    with pytest.raises(AttributeError):
        importlib.import_module("lookbench_pipeline.detect").no_such_name  # noqa: B018
    code = ("import sys, lookbench_pipeline.detect; "
            "print(sorted(m for m in sys.modules if m.startswith('lookbench_pipeline.demo')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
