"""Labels imported from data sets' own annotation files (the real ones in ../shared/realdata/annotations, and hostile
ones built here), a shop's own facets, and the precedence that merges every source of an item's labels."""

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline import label_import as li
from lookbench_pipeline import schemas
from lookbench_pipeline.config import DEMO_SITE, ConfigError, load_config
from lookbench_pipeline.taxonomy import Taxonomy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mapper():
    return li.LabelMapper(Taxonomy.load())


def _reconciles(counts):
    assert counts["entries"] == counts["mapped"] + counts["unmapped"] + counts.get("no_photo", 0), counts


def _unmapped(garment):
    return {(u["name"], u["value"]): u["reason"] for u in garment.unmapped}


# ------------------------------------------------------------------------------------- the real files


def test_vitonhd_tags_map_onto_the_taxonomy(realdata, mapper):
    af = li.read_vitonhd(realdata / "annotations/vitonhd_test_tagged.json", mapper)
    c = af.counts()
    _reconciles(c)
    assert c["entries"] == 1874 and c["mapped"] == 1834
    assert c["unmapped"] == c["unmapped.unknown_category"] == 40  # Bustier, Bolero, Vest, Vest Suit, swimsuits
    assert {k: v for k, v in c.items() if k.startswith("category.")} == {
        "category.top": 1408, "category.shirt": 335, "category.sweater": 54, "category.dress": 35,
        "category.skirt": 1, "category.outerwear": 1}
    by = {g.file_name: g for g in af.garments}
    g = by["00055_00.jpg"]  # the garment of images/studio/ootd_00055_00.jpg
    assert g.category == "top" and g.attributes == {
        "style": "t_shirt", "color": "purple", "pattern": "graphic", "material": "cotton", "sleeve_length": "short",
        "neckline": "crew", "fit": "regular"}
    # what the taxonomy cannot say is recorded with its reason, not guessed
    assert _unmapped(g) == {("details", "Patchwork"): "no_taxonomy_value", ("looks", "Casual"): "not_in_taxonomy",
                            ("length", "normal"): "no_taxonomy_value"}
    assert g.size == (768, 1024) and 0 < g.box[0] < g.box[2] <= 768 and 0 < g.box[1] < g.box[3] <= 1024
    assert _unmapped(by["14627_00.jpg"])[("details", "Buckle")] == "not_allowed_for_category"  # tops have no closure
    assert by["04096_00.jpg"].reason == "unknown_category"  # a "Bustier": no category of ours
    # the item tag names the garment; an item that names a feature takes its category_name's category
    assert (by["07344_00.jpg"].category, by["07344_00.jpg"].attributes["style"]) == ("dress", "jumpsuit")
    assert (by["06567_00.jpg"].category, by["06567_00.jpg"].attributes["style"]) == ("shirt", "button_up_shirt")
    assert (by["00955_00.jpg"].category, by["00955_00.jpg"].attributes["neckline"]) == ("dress", "turtleneck")
    # the person photo's box of the same garment
    person = {g.file_name: g for g in li.read_vitonhd(realdata / "annotations/vitonhd_test_tagged.json", mapper,
                                                       view="image").garments}["00055_00.jpg"]
    assert person.attributes == g.attributes and person.box != g.box


def test_fashionpedia_garments_take_their_parts_attributes(realdata, mapper):
    ann = realdata / "annotations"
    af = li.read_fashionpedia(ann / "fashionpedia_sample.json", mapper,
                              ann / "fashionpedia_category_attributes_descriptions.json")
    c = af.counts()
    _reconciles(c)
    assert c["entries"] == 12 and c["mapped"] == 12
    dress = next(g for g in af.garments if g.source_category == "dress")
    # the sample numbers its 320 attributes otherwise than the ontology: joined by name ("knee (length)" is 147
    # in the sample, 151 in the ontology); the sleeves and the neckline are parts whose attributes are the dress's
    assert dress.attributes == {"length": "knee", "sleeve_length": "long", "silhouette": "fit_and_flare",
                                "waist": "empire", "sleeve_type": "set_in", "neckline": "plunging"}
    assert _unmapped(dress) == {("attribute", "symmetrical"): "no_taxonomy_value",
                                ("attribute", "circle"): "not_allowed_for_category",  # a dress is not a circle skirt
                                ("attribute", "gauze"): "not_in_ontology"}  # the final ontology lists no textiles
    parts = [g for g in af.garments if g.part]
    assert len(parts) == 6 and all(p.attached_to for p in parts)
    shirt = next(g for g in af.garments if g.source_category == "shirt, blouse")
    assert shirt.category == "shirt" and shirt.attributes["collar"] == "shirt_collar"  # from the collar part
    pants = next(g for g in af.garments if g.source_category == "pants")
    assert pants.category == "trousers" and pants.attributes == {"closure": "zip", "pattern": "solid", "waist": "mid"}
    assert next(g for g in af.garments if g.source_category == "hat").category == "accessory"
    # polygons only: the box is the polygon's
    shoe = next(g for g in af.garments if g.source_category == "shoe")
    assert shoe.box == [185.0, 890.0, 232.0, 935.0]


def test_deepfashion2_and_modanet_categories(realdata, mapper):
    ann = realdata / "annotations"
    df = li.read_deepfashion2(ann / "mmpose_deepfashion2_coco.json", mapper)
    _reconciles(df.counts())
    assert [(g.file_name, g.category, g.attributes, g.box) for g in df.garments] == [
        ("000264.jpg", "dress", {"sleeve_length": "long"}, [103.0, 80.0, 704.0, 749.0]),
        ("000265.jpg", "dress", {"sleeve_length": "long"}, [178.0, 62.0, 599.0, 748.0])]
    mn = li.read_modanet(ann / "modanet_tiny_snaps_test.json", mapper, ann / "modanet_categories.tsv")
    c = mn.counts()
    _reconciles(c)
    assert c["entries"] == 38 and c["mapped"] == 35
    assert c["unmapped.ambiguous_category"] == 3  # "coat/jacket/.../Jumpsuits/Rompers/vest" spans 3 categories
    assert c["category.shoes"] == 10 and c["category.top"] == 9 and c["category.skirt"] == 5
    # the snaps number categories from 1, categories.tsv from 0: item category 4 is the tsv's 3, footwear
    first = mn.garments[0]
    assert (first.source_category, first.category, first.box) == ("footwear", "shoes", [196.0, 519.0, 227.0, 559.0])


def test_the_real_drop_takes_labels_from_every_file(realdata, mapper):
    cfg = load_config(ROOT / "configs/realdata.yaml")
    imp = li.import_drop(cfg.drops[0], mapper)
    for counts in imp.counts.values():
        _reconciles(counts)
    c = imp.counts
    assert (c["vitonhd:vitonhd_test_tagged.json#cloth"]["mapped"], c["vitonhd:vitonhd_test_tagged.json#cloth"]
            ["no_photo"]) == (21, 1853)  # 21 studio garments of the drop are VITON-HD test garments
    assert c["vitonhd:vitonhd_test_tagged.json#image"]["photos_labelled"] == 7  # and 7 person photos wear one
    assert c["fashionpedia:fashionpedia_sample.json"] == {
        "mapped": 12, "unmapped": 0, "no_photo": 0, "entries": 12, "photos": 2, "photos_labelled": 2}
    assert c["deepfashion2:mmpose_deepfashion2_coco.json"]["photos_labelled"] == 2
    assert c["modanet:modanet_tiny_snaps_test.json"]["no_photo"] == 38  # ModaNet's photos are not in the drop
    by_name = {Path(p).name: rows for p, rows in imp.photos.items()}
    [row] = by_name["street_fashionpedia_000000009813.jpg"]
    # a street photo: labelled with its largest garment, every garment kept with its box
    assert row["category"] == "dress" and row["annotator"] == "import:fashionpedia"
    assert sorted(g["category"] for g in row["garments"]) == ["dress", "shoes", "shoes"]
    assert all(g["box"] for g in row["garments"]) and row["box"] == [50.0, 186.0, 410.0, 698.0]
    assert by_name["ootd_00055_00.jpg"][0]["category"] == "top"


# ---------------------------------------------------------------------------------------- hostile files


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_hostile_vitonhd_files(tmp_path, mapper):
    for data, match in (("{not json", "not valid JSON"), ([1, 2], r"'data' list"),
                        ({"data": [{"file_name": "a.jpg"}, {"category_name": "TOPS"}]}, r"data\[1\] has no 'file_name'"),
                        ({"data": [{"file_name": "a.jpg", "tag_info": "item=T-shirt"}]}, r"data\[0\] \(a.jpg\): 'tag_info'"),
                        ({"data": [{"file_name": "a.jpg"}, {"file_name": "a.jpg"}]}, r"data\[1\] and data\[0\] both")):
        with pytest.raises(ConfigError, match=match):
            li.read_vitonhd(_write(tmp_path, "v.json", data), mapper)
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="bad.json: not UTF-8"):
        li.read_vitonhd(tmp_path / "bad.json", mapper)
    tags = lambda **kw: [{"tag_name": k, "tag_category": v} for k, v in kw.items()]  # noqa: E731
    af = li.read_vitonhd(_write(tmp_path, "v.json", {"data": [
        {"file_name": "1.jpg", "category_name": "TOPS", "tag_info": tags(item="Space Suit", colors="Red")},
        {"file_name": "2.jpg", "category_name": "TOPS", "tag_info": tags(item="Blouse", colors="Ultraviolet",
                                                                         mood="Happy", fit="None"),
         "image": [{"image_path": "cloth", "image_width": 100, "image_height": 200, "bbox": {"left": "x"}}]},
        {"file_name": "3.jpg", "category_name": "SKIRTS", "tag_info": []},
        {"file_name": "4.jpg", "category_name": "GLOVES", "tag_info": [{"tag_name": "item", "tag_category": None}]},
    ]}), mapper)
    g1, g2, g3, g4 = af.garments
    assert g1.reason == "unknown_category" and _unmapped(g1) == {("item", "Space Suit"): "unknown_category"}
    assert g2.category == "shirt" and g2.attributes == {"style": "blouse"} and g2.box is None
    assert _unmapped(g2) == {("colors", "Ultraviolet"): "no_taxonomy_value", ("mood", "Happy"): "unknown_tag",
                             ("bbox", "cloth"): "no_box"}  # "None" says nothing: not a value
    assert g3.category == "skirt"  # no item tag: the category_name decides
    assert g4.reason == "unknown_category"
    c = af.counts()
    _reconciles(c)
    assert (c["mapped"], c["unmapped"]) == (2, 2)


def test_hostile_coco_files(tmp_path, mapper):
    onto = _write(tmp_path, "onto.json", {"categories": [{"id": 0, "name": "dress"}],
                                          "attributes": [{"id": 151, "name": "knee (length)"}]})
    for data, match in (({"images": []}, "COCO-style"),
                        ({"images": [{"id": 1}], "annotations": [{"image_id": 1}], "categories": []},
                         r"annotations\[0\] \(id None\) needs 'image_id' and 'category_id'"),
                        ({"images": [{"file_name": "x"}], "annotations": []}, r"images\[0\] has no 'id'"),
                        ({"images": [], "annotations": [], "categories": [{"id": "a", "name": "x"}]},
                         r"categories\[0\] needs an integer 'id'"),
                        ({"images": [{"id": 1}], "annotations": [{"id": 7, "image_id": 1, "category_id": 0,
                                                                   "attribute_ids": "151"}],
                          "categories": [{"id": 0, "name": "dress"}]}, "annotation 7: 'attribute_ids'")):
        with pytest.raises(ConfigError, match=match):
            li.read_fashionpedia(_write(tmp_path, "f.json", data), mapper, onto)
    with pytest.raises(ConfigError, match="onto.json: no 'attributes' list"):
        li.read_fashionpedia(_write(tmp_path, "f.json", {"images": [], "annotations": [], "categories": []}), mapper,
                             _write(tmp_path, "onto.json", {"categories": []}))
    onto = _write(tmp_path, "onto.json", {"categories": [{"id": 0, "name": "dress"}],
                                          "attributes": [{"id": 151, "name": "knee (length)"}]})
    fp = li.read_fashionpedia(_write(tmp_path, "f.json", {
        "images": [{"id": 1, "file_name": "1.jpg", "width": 100, "height": 100}],
        "categories": [{"id": 0, "name": "dress", "supercategory": "wholebody"},
                       {"id": 1, "name": "umbrella", "supercategory": "others"},
                       {"id": 2, "name": "pocket", "supercategory": "garment parts"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 0, "attribute_ids": [151, 999], "bbox": [10, 10, 50, 80]},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": "[0, 0, 5, 5]"},
            {"id": 3, "image_id": 1, "category_id": 9, "bbox": [0, 0, 5, 5]},
            {"id": 4, "image_id": 2, "category_id": 0, "bbox": [0, 0, 5, 5]},
            {"id": 5, "image_id": 1, "category_id": 2, "bbox": [20, 40, 10, 10]},  # inside the dress
            {"id": 6, "image_id": 1, "category_id": 2, "bbox": [80, 0, 10, 10]},  # outside every garment
        ]}), mapper, onto)
    dress, umbrella, unknown, orphan_image, pocket, lost = fp.garments
    assert dress.attributes == {"length": "knee", "details": "pockets"}  # the pocket part gives its detail
    assert _unmapped(dress) == {("attribute", "999"): "not_in_ontology"}
    assert (umbrella.reason, umbrella.box) == ("not_in_taxonomy", [0.0, 0.0, 5.0, 5.0])  # a bbox written as a string
    assert unknown.reason == "unknown_category" and orphan_image.reason == "unknown_image"
    assert pocket.attached_to == dress.entry and lost.reason == "part_without_garment"
    _reconciles(fp.counts())
    df = li.read_deepfashion2(_write(tmp_path, "d.json", {
        "images": [{"id": 1, "file_name": "1.jpg"}], "categories": [{"id": 1, "name": "short sleeve top"},
                                                                    {"id": 14, "name": "poncho"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 0, 9]},
                        {"id": 2, "image_id": 1, "category_id": 14}]}), mapper)
    top, poncho = df.garments
    assert (top.category, top.attributes, top.box) == ("top", {"sleeve_length": "short"}, None)  # a zero-width box
    assert poncho.reason == "unknown_category" and _unmapped(poncho) == {("category", "poncho"): "unknown_category"}


def test_an_id_that_is_no_number_or_string_is_refused_naming_the_entry(tmp_path, mapper):
    # a list or an object where an id belongs was "TypeError: unhashable type" out of `lookbench build` (exit 1)
    onto = _write(tmp_path, "onto.json", {"categories": [{"id": 0, "name": "dress"}], "attributes": []})
    coco = {"images": [{"id": 1, "file_name": "1.jpg"}], "categories": [{"id": 0, "name": "dress"}],
            "annotations": [{"id": 7, "image_id": 1, "category_id": 0}]}
    for where, value, match in (
            ("category_id", [24], r"annotations\[0\] \(id 7\): 'category_id' must be a number or a string, not \[24\]"),
            ("image_id", {"id": 1}, r"annotations\[0\] \(id 7\): 'image_id' must be a number"),
            ("image_id", "[1]", r"annotations\[0\] \(id 7\): 'image_id' must be a number"),  # a list as a string
            ("image_id", True, r"'image_id' must be a number"),
            ("id", [9813], r"images\[0\]: 'id' must be a number or a string, not \[9813\]")):
        bad = json.loads(json.dumps(coco))
        (bad["images"][0] if where == "id" else bad["annotations"][0])[where] = value
        f = _write(tmp_path, "f.json", bad)
        for read in (lambda: li.read_fashionpedia(f, mapper, onto), lambda: li.read_deepfashion2(f, mapper),
                     lambda: li.read_modanet(f, mapper, _write(tmp_path, "c.tsv", "0\tdress\n"))):
            with pytest.raises(ConfigError, match=match):
                read()
    tsv = _write(tmp_path, "c.tsv", "0\tbag\n")
    for snaps, match in (([{"image_id": [5], "items": []}], r"\[0\] is not a ModaNet snap"),
                         ([{"image_id": 5, "items": [{"category_id": {}}]}], r"image 5 item 0: 'category_id' must")):
        with pytest.raises(ConfigError, match=match):
            li.read_modanet(_write(tmp_path, "m.json", snaps), mapper, tsv)
    # through a drop: the documented configuration error, naming the drop, the file and the entry
    (tmp_path / "d/street").mkdir(parents=True)
    bad = {**coco, "annotations": [{"id": 7, "image_id": 1, "category_id": [0]}]}
    _write(tmp_path, "f.json", bad)
    drop = {"name": "d", "path": "d", "subfolders": {"street": "real_streetlook:query"},
            "annotations": [{"kind": "deepfashion2", "path": "f.json", "image_name": "street/{file_name}"}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"drops": [drop]}))
    with pytest.raises(ConfigError, match=r"drop 'd': .*f.json: annotations\[0\] \(id 7\): 'category_id'"):
        li.check_drop(load_config(tmp_path / "c.yaml").drops[0], Taxonomy.load())


def test_an_image_id_given_to_two_files_is_refused(tmp_path, mapper):
    # a later images[] entry silently replaced the earlier one: its photo lost its label, the other took it
    coco = {"images": [{"id": 264, "file_name": "000264.jpg"}, {"id": 265, "file_name": "000265.jpg"},
                       {"id": "264", "file_name": "000264.jpg"}],  # the same image twice (id as a string): fine
            "categories": [{"id": 1, "name": "short sleeve top"}],
            "annotations": [{"id": 1, "image_id": 264, "category_id": 1, "bbox": [0, 0, 5, 5]}]}
    assert [g.file_name for g in li.read_deepfashion2(_write(tmp_path, "d.json", coco), mapper).garments] == [
        "000264.jpg"]
    coco["images"].append({"id": 264, "file_name": "000266.jpg"})
    with pytest.raises(ConfigError,
                       match=r"d.json: images\[3\] \('000266.jpg'\) and images\[0\] \('000264.jpg'\) both have id 264"):
        li.read_deepfashion2(_write(tmp_path, "d.json", coco), mapper)


def test_an_image_size_that_is_no_size_is_unknown(tmp_path, mapper):
    # an infinite width was OverflowError out of int(); a bool was a 1-pixel image
    sizes = ("1e999", "Infinity", "-Infinity", "NaN", "-768", "0", "0.5", "true", '"wide"', "null", "[768]")
    entries = ",".join(
        f'{{"file_name": "{i}.jpg", "category_name": "TOPS", "image": [{{"image_path": "cloth", "image_width": {w}, '
        f'"image_height": 1024, "bbox": {{"left": 0.1, "top": 0.1, "width": 0.5, "height": 0.5}}}}]}}'
        for i, w in enumerate(sizes + ('"768"', "768.0")))
    af = li.read_vitonhd(_write(tmp_path, "v.json", f'{{"data": [{entries}]}}'), mapper)
    assert [(g.size, g.box, g.reason) for g in af.garments[:len(sizes)]] == [(None, None, None)] * len(sizes)
    assert all(_unmapped(g) == {("bbox", "cloth"): "no_box"} for g in af.garments[:len(sizes)])
    assert [(g.size, g.box) for g in af.garments[len(sizes):]] == [((768, 1024), [76.8, 102.4, 460.8, 614.4])] * 2
    for w in sizes:  # a COCO file: the size is unknown, the box is the annotation's own
        text = ('{"images": [{"id": 1, "file_name": "1.jpg", "width": %s, "height": 100}], "categories": [{"id": 1, '
                '"name": "short sleeve top"}], "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": '
                '[1, 2, 3, 4]}]}' % w)
        [g] = li.read_deepfashion2(_write(tmp_path, "d.json", text), mapper).garments
        assert (g.size, g.box, g.reason, g.category) == (None, [1.0, 2.0, 4.0, 6.0], None, "top"), w


def test_a_box_is_clipped_to_its_image_and_one_outside_it_never_labels_the_photo(tmp_path, mapper):
    # VITON-HD's x1 was never clamped (left 1.5: [1152, .., 768, ..], x1 > x2, "labelled"); a COCO box wholly outside
    # its photo was the largest garment and became the photo's label
    def viton(**bbox):
        b = {"left": 0.1, "top": 0.1, "width": 0.5, "height": 0.5, **bbox}
        return {"image_path": "cloth", "image_width": 768, "image_height": 1024, "bbox": b}
    af = li.read_vitonhd(_write(tmp_path, "v.json", {"data": [
        {"file_name": f"{i}.jpg", "category_name": "TOPS", "image": [im]} for i, im in enumerate(
            [viton(left=1.5), viton(top=-3), viton(top=-0.05), viton(left=0.9), viton(width=0)])]}), mapper)
    right, above, top_cut, right_cut, empty = af.garments
    for g in (right, above):
        assert (g.reason, g.box, g.category) == ("box_outside_image", None, "top")
        assert _unmapped(g) == {("bbox", "cloth"): "box_outside_image"}
    assert top_cut.reason is None and top_cut.box == [76.8, 0.0, 460.8, 460.8]  # clipped to the image
    assert right_cut.reason is None and right_cut.box == [691.2, 102.4, 768.0, 614.4]
    assert (empty.reason, empty.box, _unmapped(empty)) == (None, None, {("bbox", "cloth"): "no_box"})
    c = af.counts()
    assert (c["mapped"], c["unmapped"], c["unmapped.box_outside_image"]) == (3, 2, 2)
    rows = [li.photo_label([g], af.annotator, "2.0.0") for g in af.garments]
    assert [r["status"] for r in rows] == ["rejected", "rejected", "labelled", "labelled", "labelled"]
    assert rows[0]["reason"] == "import:vitonhd:box_outside_image"

    onto = _write(tmp_path, "onto.json", {"categories": [{"id": 0, "name": "dress"}], "attributes": []})
    fp = li.read_fashionpedia(_write(tmp_path, "f.json", {
        "images": [{"id": 1, "file_name": "1.jpg", "width": 618, "height": 1000}],
        "categories": [{"id": 0, "name": "dress", "supercategory": "wholebody"},
                       {"id": 1, "name": "shoe", "supercategory": "lowerbody"},
                       {"id": 2, "name": "pocket", "supercategory": "garment parts"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 0, "bbox": [50, 186, 360, 512]},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [700, 1100, 5000, 5000]},  # wholly outside: larger
            {"id": 3, "image_id": 1, "category_id": 1, "bbox": [600, 900, 100, 200]},  # partly: clipped
            {"id": 4, "image_id": 1, "category_id": 2, "bbox": [-90, 0, 80, 80]},  # a part wholly outside
            {"id": 5, "image_id": 1, "category_id": 1, "segmentation": [[1, 2, "Infinity", 4, 5, 6]]},  # no box
            {"id": 6, "image_id": 1, "category_id": 1, "segmentation": {"size": [0, 9], "counts": [0, 3]}},
        ]}), mapper, onto)
    dress, outside, cut, part, nan, rle = fp.garments
    assert (outside.reason, outside.box) == ("box_outside_image", None)
    assert _unmapped(outside) == {("bbox", "[700, 1100, 5700, 6100] on 618x1000"): "box_outside_image"}
    assert (cut.reason, cut.category, cut.box) == (None, "shoes", [600.0, 900.0, 618.0, 1000.0])
    assert (part.part, part.reason, part.attached_to) == (True, "box_outside_image", None)
    assert (nan.reason, nan.box, rle.reason, rle.box) == (None, None, None, None)
    c = fp.counts()
    assert (c["mapped"], c["unmapped"], c["unmapped.box_outside_image"]) == (4, 2, 2)
    row = li.photo_label(fp.garments, fp.annotator, "2.0.0")
    assert (row["category"], row["box"]) == ("dress", [50.0, 186.0, 410.0, 698.0])  # not the shoe outside it
    assert [g["entry"] for g in row["garments"]] == ["f.json#1", "f.json#3", "f.json#5", "f.json#6"]
    assert {"name": "part", "value": "pocket", "reason": "box_outside_image"} in row["unmapped"]
    assert {"name": "bbox", "value": "[700, 1100, 5700, 6100] on 618x1000", "reason": "box_outside_image"} in row[
        "unmapped"]

    coco = {"images": [{"id": 1, "file_name": "1.jpg", "width": 100, "height": 100}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [100, 0, 5, 5]},
                            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [90, 90, 50, 50]}]}
    df = li.read_deepfashion2(_write(tmp_path, "d.json", {**coco, "categories": [{"id": 1, "name": "skirt"}]}), mapper)
    mn = li.read_modanet(_write(tmp_path, "m.json", coco), mapper, _write(tmp_path, "c.tsv", "0\tskirt\n"))
    for af in (df, mn):
        assert [(g.reason, g.box) for g in af.garments] == [("box_outside_image", None),
                                                             (None, [90.0, 90.0, 100.0, 100.0])]
        assert _unmapped(af.garments[0]) == {("bbox", "[100, 0, 105, 5] on 100x100"): "box_outside_image"}
        _reconciles(af.counts())


def test_hostile_modanet_files(tmp_path, mapper):
    tsv = _write(tmp_path, "c.tsv", "category_id\tcategory\n0\tbag\n1\tcoat/jacket/suit/blazers/cardigan/sweater/"
                                    "Jumpsuits/Rompers/vest\n")
    for data, match in (({"x": 1}, "COCO-style ModaNet"), ([{"image_id": 1}], r"\[0\] is not a ModaNet snap"),
                        ([{"image_id": 1, "items": [{"bbox": [0, 0, 1, 1]}]}], "image 1 item 0 has no 'category_id'")):
        with pytest.raises(ConfigError, match=match):
            li.read_modanet(_write(tmp_path, "m.json", data), mapper, tsv)
    with pytest.raises(ConfigError, match=r"c2.tsv:2: expected 'id<TAB>name'"):
        li.read_modanet(_write(tmp_path, "m.json", []), mapper, _write(tmp_path, "c2.tsv", "id\tname\nbag\n"))
    mn = li.read_modanet(_write(tmp_path, "m.json", [{"image_id": 5, "items": [
        {"category_id": 1, "bbox": [0, 0, 4, 4]}, {"category_id": 2}, {"category_id": 0}, {"category_id": "x"}]}]),
        mapper, tsv)
    assert [(g.source_category, g.category, g.reason) for g in mn.garments] == [
        ("bag", "bag", None), ("coat/jacket/suit/blazers/cardigan/sweater/Jumpsuits/Rompers/vest", None,
                               "ambiguous_category"), ("0", None, "unknown_category"), ("x", None, "unknown_category")]
    _reconciles(mn.counts())


def test_a_byte_order_mark_is_not_part_of_the_file(tmp_path, mapper):
    # an editor's UTF-8 BOM: accepted as the item sheets accept it, in the JSON files and in categories.tsv (where
    # it made the first line a header that was skipped: category 0 lost without a word)
    bom = "\ufeff"
    v = _write(tmp_path, "v.json", bom + json.dumps({"data": [{"file_name": "a.jpg", "category_name": "TOPS"}]}))
    assert [g.category for g in li.read_vitonhd(v, mapper).garments] == ["top"]
    d = _write(tmp_path, "d.json", bom + json.dumps({"images": [{"id": 1, "file_name": "1.jpg"}],
                                                     "categories": [{"id": 1, "name": "short sleeve top"}],
                                                     "annotations": [{"id": 1, "image_id": 1, "category_id": 1}]}))
    assert [g.category for g in li.read_deepfashion2(d, mapper).garments] == ["top"]
    tsv = _write(tmp_path, "c.tsv", bom + "0\tbag\n")
    assert li.read_modanet_categories(tsv) == {0: "bag"}
    mn = li.read_modanet(_write(tmp_path, "m.json", bom + json.dumps([{"image_id": 5, "items": [{"category_id": 1}]}])),
                         mapper, tsv)
    assert [g.category for g in mn.garments] == ["bag"]


# ------------------------------------------------------------------------------------------ name templates


def test_name_templates(tmp_path, mapper):
    g = li.Garment("f#1", "000000009813.jpg", 9813, "dress")
    assert li.photo_names(g, ["street/street_fashionpedia_{file_name}", "x/{stem}.png", "{image_id:012d}.jpg"]) == [
        "street/street_fashionpedia_000000009813.jpg", "x/000000009813.png", "000000009813.jpg"]
    assert li.photo_names(li.Garment("f#2", None, 7, "bag"), ["{file_name}", "m/{image_id}.jpg"]) == ["m/7.jpg"]
    for bad, match in (("{path}", "unknown field"), ("studio/x.jpg", "uses no field"), ("{file_name", "expected '}'")):
        with pytest.raises(ValueError, match=match):
            li.template_fields(bad)
    # in a drop's configuration, checked at load
    (tmp_path / "d/studio").mkdir(parents=True)
    ann = _write(tmp_path, "v.json", {"data": []})
    drop = {"name": "d", "path": "d", "subfolders": {"studio": "real_studio_flat:gallery"},
            "annotations": [{"kind": "vitonhd", "path": "v.json", "image_name": "studio/{name}"}]}
    for change, match in (({}, "unknown field"), ({"image_name": "s/{file_name}", "path": "nope.json"},
                                                  r"annotations\[0\] \(vitonhd\) path .*nope.json is not a file"),
                          ({"image_name": "{stem}.jpg", "kind": "modanet", "categories": None},
                           "needs 'categories'"),
                          ({"image_name": "{stem}.jpg", "kind": "fashionpedia"}, "needs 'categories'"),
                          ({"image_name": "{stem}.jpg", "kind": "coco"}, "kind"),
                          ({"image_name": "{stem}.jpg", "view": "image", "kind": "deepfashion2"}, "'view'")):
        d = {**drop, "annotations": [{**drop["annotations"][0], **change}]}
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({"drops": [d]}))
        with pytest.raises(ConfigError, match=match):
            load_config(tmp_path / "c.yaml")
    # an entry labels every photo a template names; entries = mapped + unmapped + no_photo
    for name in ("ootd_00001_00.jpg", "idmvton_00001_00.jpg", "ootd_00002_00.jpg", "other.jpg"):
        (tmp_path / "d/studio" / name).write_bytes(b"x")
    tags = [{"tag_name": "item", "tag_category": "T-shirts"}]
    _write(tmp_path, "v.json", {"data": [{"file_name": f"0000{i}_00.jpg", "category_name": "TOPS",
                                          "tag_info": tags if i != 2 else [{"tag_name": "item",
                                                                            "tag_category": "Bustier"}]}
                                         for i in (1, 2, 3)]})
    d = {**drop, "annotations": [{"kind": "vitonhd", "path": "v.json",
                                  "image_name": ["studio/ootd_{file_name}", "studio/idmvton_{file_name}"]}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"drops": [d]}))
    imp = li.import_drop(load_config(tmp_path / "c.yaml").drops[0], mapper)
    [c] = imp.counts.values()
    assert (c["entries"], c["mapped"], c["unmapped"], c["no_photo"], c["photos"], c["photos_labelled"]) == (
        3, 1, 1, 1, 3, 2)
    labels = {Path(p).name: rows[0] for p, rows in imp.photos.items()}
    assert labels["ootd_00001_00.jpg"]["category"] == labels["idmvton_00001_00.jpg"]["category"] == "top"
    assert labels["ootd_00002_00.jpg"]["reason"] == "import:vitonhd:unknown_category"
    assert "other.jpg" not in labels


def test_build_refuses_a_malformed_annotation_file_before_any_run(tmp_path):
    import subprocess
    import sys

    (tmp_path / "d/studio").mkdir(parents=True)
    _write(tmp_path, "v.json", {"data": [{"file_name": "a.jpg"}, {"tag_info": []}]})
    drop = {"name": "d", "path": "d", "subfolders": {"studio": "real_studio_flat:gallery"},
            "annotations": [{"kind": "vitonhd", "path": "v.json", "image_name": "studio/{file_name}"}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data_dir": str(tmp_path / "data"), "drops": [drop],
                                                     "sites": [str(DEMO_SITE)]}))
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config",
                           str(tmp_path / "c.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert r"drop 'd': " in proc.stderr and "v.json: data[1] has no 'file_name'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "data").exists()


# -------------------------------------------------------------------------------------------- precedence


def _row(annotator, category, attrs=None, status="labelled", reason=None):
    return {"item_id": "i", "status": status, "reason": reason, "category": category,
            "attributes": [{"name": k, "value": v} for k, v in (attrs or {}).items()], "annotator": annotator,
            "taxonomy_version": "2.0.0"}


def test_precedence_and_conflicts(mapper):
    text = li.Candidate(_row("catalog-text/1", "top", {"color": "white", "details": "logo"}))
    imported = li.Candidate({**_row("import:vitonhd", "top", {"color": "navy", "sleeve_length": "long"}),
                             "box": [1.0, 2.0, 3.0, 4.0], "unmapped": [{"name": "looks", "value": "Casual",
                                                                       "reason": "not_in_taxonomy"}]})
    r = li.resolve([text, imported], mapper)
    # imported human labels beat the text; the text fills what they lack; the differing value is recorded
    assert (r["annotator"], r["category"], r["box"]) == ("import:vitonhd", "top", [1.0, 2.0, 3.0, 4.0])
    assert {a["name"]: a["value"] for a in r["attributes"]} == {"color": "navy", "sleeve_length": "long",
                                                                "details": "logo"}
    assert {a["name"]: a["value"] for a in r["attribute_sources"]} == {
        "category": "import:vitonhd", "color": "import:vitonhd", "sleeve_length": "import:vitonhd",
        "details": "catalog-text/1"}
    assert r["conflicts"] == [{"name": "color", "value": "white", "annotator": "catalog-text/1"}]
    assert r["unmapped"] == [{"name": "looks", "value": "Casual", "reason": "not_in_taxonomy"}]
    # another category: the text's labels are not mixed into the imported garment's
    r = li.resolve([li.Candidate(_row("catalog-text/1", "shirt", {"collar": "mandarin"})), imported], mapper)
    assert r["category"] == "top" and "collar" not in {a["name"] for a in r["attributes"]}
    assert r["conflicts"] == [{"name": "category", "value": "shirt", "annotator": "catalog-text/1"}]
    # an image model beats the text, and the text does not fill the image model's label
    vlm = li.Candidate({**_row("vlm:qwen@lookbench-annotate/1", "top", {"color": "red"}), "model": "qwen"})
    r = li.resolve([text, vlm], mapper)
    assert r["model"] == "qwen" and {a["name"]: a["value"] for a in r["attributes"]} == {"color": "red"}
    # the shop's facets beat an image model; imported labels beat the facets
    facets = li.facet_candidate(mapper, "i", [{"name": "Colour", "value": "Navy blue"},
                                              {"name": "Sleeve length", "value": "Short sleeve"}], li.FACETS_SCHEMA_ORG)
    r = li.resolve([vlm, facets], mapper)
    assert (r["annotator"], {a["name"]: a["value"] for a in r["attributes"]}) == (
        "vlm:qwen@lookbench-annotate/1", {"color": "navy", "sleeve_length": "short"})  # facets give no category
    assert r["conflicts"] == [{"name": "color", "value": "red", "annotator": "vlm:qwen@lookbench-annotate/1"}]
    r = li.resolve([facets, imported], mapper)
    assert {a["name"]: a["value"] for a in r["attributes"]}["sleeve_length"] == "long"
    assert {"name": "sleeve_length", "value": "short", "annotator": "facets:schema.org"} in r["conflicts"]
    # nothing labels the item: the best source's status and reason
    r = li.resolve([li.Candidate(_row("catalog-text/1", None, status="rejected", reason="no_text")),
                    li.Candidate(_row("import:vitonhd", None, status="rejected",
                                      reason="import:vitonhd:unknown_category"))], mapper)
    assert (r["status"], r["reason"]) == ("rejected", "import:vitonhd:unknown_category")


def test_additional_property_facets_of_a_jsonld_page(tmp_path):
    from lookbench_pipeline.config import load_config as load
    from lookbench_pipeline.extract import extract_products
    from lookbench_pipeline.pipeline import stage_attributes

    props = [("Sleeve length", "Long sleeve"), ("Collar", "Button-down collar"), ("Material", "100% cotton"),
             ("Fit", "Slim fit"), ("Pattern", "Pinstripe"), ("Care", "Machine wash 30°"), ("Length", "Floor-length")]
    doc = {"@context": "https://schema.org", "@type": "Product", "name": "Oxford blouse", "sku": "B1",
           "image": "https://shop.example/b1.jpg",
           "offers": {"@type": "Offer", "price": "39.90", "priceCurrency": "EUR"},
           "additionalProperty": [{"@type": "PropertyValue", "name": n, "value": v} for n, v in props]
           + [{"@type": "PropertyValue", "propertyID": "Neckline", "value": ["V-neck"]}]}
    html = f'<html><head><script type="application/ld+json">{json.dumps(doc)}</script></head><body></body></html>'
    [p] = extract_products(html, "https://shop.example/p/b1")
    assert p["facets"] == [{"name": n, "value": v} for n, v in props] + [{"name": "Neckline", "value": "V-neck"}]
    assert {"name": "facets", "value": "json-ld"} in p["field_sources"]
    products = schemas.from_rows([{**{k: p.get(k) for k in schemas.PRODUCTS.names if k in p}, "product_id": "b1",
                                   "site": "shop", "url": "https://shop.example/p/b1"}], schemas.PRODUCTS)
    cfg = load(_write(tmp_path, "c.yaml", yaml.safe_dump({"data_dir": str(tmp_path / "data")})))
    table, counts = stage_attributes(cfg, products, schemas.empty(schemas.DROP_ITEMS))
    [r] = table.to_pylist()
    # the category from the title ("blouse"); the attributes from the shop's facets, mapped onto the taxonomy
    assert (r["category"], r["annotator"]) == ("shirt", "catalog-text/1")
    attrs = {a["name"]: a["value"] for a in r["attributes"]}
    assert attrs == {"style": "blouse", "sleeve_length": "long", "collar": "button_down", "material": "cotton",
                     "fit": "slim", "pattern": "striped", "neckline": "v_neck"}
    assert {a["name"]: a["value"] for a in r["attribute_sources"]}["collar"] == "facets:schema.org"
    assert {(u["name"], u["reason"]) for u in r["unmapped"]} == {("Care", "unknown_facet"),
                                                               ("Length", "not_allowed_for_category")}
    assert counts["sources"]["merged"] == 1


def test_items_sheet_category_and_attributes_columns(tmp_path):
    from lookbench_pipeline.pipeline import stage_attributes, stage_drops

    (tmp_path / "d/studio").mkdir(parents=True)
    for n in ("a.jpg", "b.jpg", "c.jpg"):
        (tmp_path / "d/studio" / n).write_bytes(b"x")
    (tmp_path / "d/items.csv").write_text(
        "path,item_id,title,category,attributes\n"
        "studio/a.jpg,a,,Midi skirt,colour: Burgundy; length: midi; waist: high waist; heel: flat\n"
        "studio/b.jpg,b,Red dress,,sleeve_length: sleeveless\n"
        "studio/c.jpg,c,,,fit: relaxed\n")
    drop = {"name": "d", "path": "d", "subfolders": {"studio": "real_studio_flat:gallery"}}
    cfg = load_config(_write(tmp_path, "c.yaml", yaml.safe_dump({"data_dir": str(tmp_path / "data"),
                                                                 "drops": [drop]})))
    items = stage_drops(cfg, datetime.now(timezone.utc))
    table, counts = stage_attributes(cfg, schemas.empty(schemas.PRODUCTS), items)
    by = {r["item_id"]: r for r in table.to_pylist()}
    a = by["a"]  # no title: the sheet's own category and attributes label it
    assert (a["status"], a["category"], a["annotator"]) == ("labelled", "skirt", "facets:items-sheet")
    assert {x["name"]: x["value"] for x in a["attributes"]} == {"color": "burgundy", "length": "midi", "waist": "high"}
    assert a["unmapped"] == [{"name": "heel", "value": "flat", "reason": "not_allowed_for_category"}]
    b = by["b"]  # the title decides the category, the sheet's attribute fills it
    assert (b["category"], b["annotator"]) == ("dress", "catalog-text/1")
    assert {x["name"]: x["value"] for x in b["attributes"]} == {"color": "red", "sleeve_length": "sleeveless"}
    # facets without a category cannot label an item: the text's reason stays
    assert (by["c"]["status"], by["c"]["reason"]) == ("rejected", "no_text")
    assert counts["labelled"] == 2 and counts["sources"]["labelled_by.facets:items-sheet"] == 1
    (tmp_path / "d/items.csv").write_text("path,item_id,attributes\nstudio/a.jpg,a,colour burgundy\n")
    with pytest.raises(ConfigError, match=r"items.csv:2: attributes: 'colour burgundy' is not 'name: value'"):
        stage_drops(cfg, datetime.now(timezone.utc))
