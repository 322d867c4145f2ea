"""Dedup that sees the garment (issue 16): colour variants of a small garment on a white packshot are not merged,
a background-removed cut-out and its photograph are one cluster, and copies stay found. Every input goes through the
intake (`images.take_in`) and `dedup.cluster` / `contamination.find_contamination` with the shipped configuration."""

import io
import itertools
from datetime import datetime, timezone
from pathlib import Path

import pytest

from lookbench_pipeline import dedup, foreground
from lookbench_pipeline.config import DedupConfig, ImageConfig
from lookbench_pipeline.contamination import find_contamination
from lookbench_pipeline import schemas
from lookbench_pipeline.images import ImageRef, take_in
from lookbench_pipeline.store import LocalStore
from dedup_inputs import cutout, dotted, greyscale, packshot, reencoded

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "images"
SHIPPED = DedupConfig()
T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)


def _intake(tmp_path, files: dict[str, bytes]) -> dict[str, dict]:
    """name -> the ``images`` row the intake made of those bytes."""
    refs = [ImageRef("drop_item", name, 0, name, "test", T0) for name in files]
    res = take_in(refs, files.__getitem__, LocalStore(tmp_path / "store"), ImageConfig())
    assert all(r["status"] == "accepted" for r in res.refs), res.refs
    by_sha = {r["image_sha256"]: r for r in res.images}
    return {r["owner_id"]: by_sha[r["image_sha256"]] for r in res.refs}


def _clusters(rows: dict[str, dict]) -> dict[str, str]:
    got = dedup.cluster(list({r["image_sha256"]: r for r in rows.values()}.values()), SHIPPED.hamming_threshold,
                        **SHIPPED.match)
    by_sha = {r["image_sha256"]: r["cluster_id"] for r in got}
    return {name: by_sha[r["image_sha256"]] for name, r in rows.items()}


def _ham(a: dict, b: dict) -> int:
    return bin(int(a["phash"], 16) ^ int(b["phash"], 16)).count("1")


@pytest.mark.parametrize("share", [0.15, 0.25])
def test_colour_variants_of_a_small_garment_on_white_are_not_merged(tmp_path, share):
    red, blue, green = (200, 30, 40), (35, 60, 190), (40, 140, 60)
    rows = _intake(tmp_path, {"red": packshot(red, share), "blue": packshot(blue, share),
                              "green": packshot(green, share), "red-copy": reencoded(packshot(red, share))})
    # the input of the defect: pHash and the whole-picture colour check cannot tell the colours apart
    assert _ham(rows["red"], rows["blue"]) <= SHIPPED.hamming_threshold
    assert dedup.color_diff(rows["red"]["color_signature"], rows["blue"]["color_signature"]) <= SHIPPED.max_color_diff
    c = _clusters(rows)
    assert len({c["red"], c["blue"], c["green"]}) == 3, "each colour is its own picture"
    assert c["red"] == c["red-copy"], "a resized, re-encoded copy is still the same picture"
    assert foreground.foreground_delta_e(rows["red"]["fg_signature"], rows["red-copy"]["fg_signature"]) <= 2.0


COLOURS = {"red": (200, 30, 40), "blue": (35, 60, 190), "green": (40, 140, 60), "navy": (30, 35, 80),
           "pink": (235, 160, 185), "grey": (150, 150, 150)}


@pytest.mark.parametrize("share", [0.25, 0.4])
def test_a_grey_variant_stored_as_a_greyscale_file_merges_no_other_colour(tmp_path, share):
    """A shop's grey colour stored as a one-channel JPEG: it cannot be compared in colour, so it is compared by
    grey level (the navy, pink and red versions share its pHash and were all merged into it); a greyscale copy of
    the pink joins the pink, whose grey level no other colour has."""
    files = {c: packshot(rgb, share) for c, rgb in COLOURS.items() if c != "grey"}
    files["grey"] = greyscale(packshot(COLOURS["grey"], share))
    files["pink-grey"] = greyscale(files["pink"])
    rows = _intake(tmp_path, files)
    assert "grayscale" in rows["grey"]["flags"] and "grayscale" not in rows["pink"]["flags"]
    assert sum(_ham(rows["grey"], rows[c]) <= SHIPPED.hamming_threshold for c in COLOURS if c != "grey") >= 3
    c = _clusters(rows)
    assert len({c[k] for k in COLOURS}) == len(COLOURS), "each colour is its own picture"
    assert c["pink-grey"] == c["pink"], "a greyscale copy is the same picture"


def test_a_greyscale_copy_of_one_of_two_colours_of_one_grey_level_joins_neither(tmp_path):
    """The red and the blue shirt turn almost the same grey: their greyscale copy matches both by grey level, and
    joining it to either would merge them through it."""
    red, blue = packshot(COLOURS["red"], 0.4), packshot(COLOURS["blue"], 0.4)
    rows = _intake(tmp_path, {"red": red, "blue": blue, "red-grey": greyscale(red)})
    assert all(dedup.confirmed_by_colour(rows["red-grey"], rows[k], SHIPPED.max_color_diff,
                                         SHIPPED.max_foreground_delta_e) for k in ("red", "blue"))
    c = _clusters(rows)
    assert len(set(c.values())) == 3


def test_a_greyscale_file_its_rgb_copy_and_the_colour_original_are_one_picture(tmp_path):
    """A resized copy of a greyscale file is an RGB picture with three equal channels (not flagged ``grayscale``):
    it is compared with the greyscale file as a grey picture, so the two are one cluster, which then joins the
    colour original it is a copy of (as the real "hopper" encodings and their copies in BENCHMARKS.md)."""
    pink = packshot(COLOURS["pink"], 0.4)
    grey = greyscale(pink)
    rows = _intake(tmp_path, {"pink": pink, "grey": grey, "grey-copy": reencoded(grey)})
    assert "grayscale" not in rows["grey-copy"]["flags"] and dedup.achromatic(rows["grey-copy"]["color_signature"])
    assert not dedup.achromatic(rows["pink"]["color_signature"])
    assert len(set(_clusters(rows).values())) == 1


def _leaks(tmp_path, legacy_files: dict[str, bytes], new_files: dict[str, bytes]) -> list[tuple[str, str, str]]:
    """``(new name, kind, legacy name)`` of every leak the shipped rule finds."""
    legacy = _intake(tmp_path / "legacy", legacy_files)
    index = schemas.from_rows([{**r, "source": "fashion200k", "path": n, "item_id": n, "stamp": "x"}
                               for n, r in legacy.items()], schemas.CONTAMINATION_INDEX)
    new = _intake(tmp_path / "new", new_files)
    name = {r["image_sha256"]: n for n, r in new.items()}
    found = find_contamination(schemas.from_rows(list(new.values()), schemas.IMAGES), index,
                               SHIPPED.hamming_threshold, **SHIPPED.match).to_pylist()
    return sorted((name[r["image_sha256"]], r["kind"], r["matched_path"]) for r in found)


def test_greyscale_files_against_a_legacy_index_are_compared_by_grey_level(tmp_path):
    """Contamination uses the same rule: a legacy greyscale packshot is not a leak of every colour of its garment
    (the red, navy and pink share its pHash), and a greyscale copy of a legacy colour packshot is a leak of it."""
    green, grey = packshot(COLOURS["green"], 0.4), greyscale(packshot(COLOURS["grey"], 0.4))
    colours = {c: packshot(COLOURS[c], 0.4) for c in ("red", "navy", "pink")}
    rows = _intake(tmp_path / "premise", {"grey": grey, **colours})
    assert all(_ham(rows["grey"], rows[c]) <= SHIPPED.hamming_threshold for c in colours), "they share its pHash"
    leaks = _leaks(tmp_path, {"grey": grey, "green": green}, {**colours, "green-grey": greyscale(green)})
    assert leaks == [("green-grey", "near", "green")]


def test_a_greyscale_copy_of_a_legacy_photo_is_a_leak(tmp_path):
    photo = _street(1)[0]
    assert _leaks(tmp_path, {photo.name: photo.read_bytes()}, {"grey": greyscale(photo.read_bytes())}) == [
        ("grey", "near", photo.name)]


def _rgb_grey(data: bytes) -> bytes:
    """A greyscale copy stored as RGB (three equal channels), JPEG quality 90."""
    from PIL import Image, ImageOps

    buf = io.BytesIO()
    ImageOps.grayscale(Image.open(io.BytesIO(data))).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_greyscale_clusters_do_not_depend_on_input_order_nor_bridge_two_colours(tmp_path):
    """A tinted grey shirt and a pinkish one turn the same grey and share a pHash. The tinted one's greyscale file
    and its grey copy stored as RGB join it (the copy links them), and the greyscale file, which also matches the
    pink by grey level, does not take the pink in: a cluster that holds a colour already joins no other. Every
    input order gives these clusters (within one pHash the members are compared as two near groups are)."""
    tinted, pink = packshot((150, 145, 138), 0.4), packshot((185, 128, 130), 0.4)
    rows = _intake(tmp_path, {"tinted": tinted, "pink": pink, "grey-file": greyscale(tinted),
                              "grey-rgb": _rgb_grey(tinted)})
    assert dedup.achromatic(rows["grey-rgb"]["color_signature"])
    assert not dedup.achromatic(rows["tinted"]["color_signature"])
    assert dedup.confirmed_by_colour(rows["grey-file"], rows["pink"], SHIPPED.max_color_diff,
                                     SHIPPED.max_foreground_delta_e), "the premise: the pink matches by grey level"
    name = {r["image_sha256"]: n for n, r in rows.items()}
    partitions = set()
    for order in itertools.permutations(rows):
        got = dedup.cluster([rows[n] for n in order], SHIPPED.hamming_threshold, **SHIPPED.match)
        by_cluster: dict[str, set[str]] = {}
        for r in got:
            by_cluster.setdefault(r["cluster_id"], set()).add(name[r["image_sha256"]])
        partitions.add(frozenset(frozenset(v) for v in by_cluster.values()))
    assert partitions == {frozenset({frozenset({"tinted", "grey-file", "grey-rgb"}), frozenset({"pink"})})}


def test_pale_garment_on_white_has_a_foreground(tmp_path):
    """An ecru shirt on white (ΔE*ab about 12 from the background) is still the foreground, not background."""
    rows = _intake(tmp_path, {"ecru": packshot((240, 232, 214), 0.25), "grey": packshot((205, 205, 205), 0.25)})
    assert foreground.has_uniform_background(rows["ecru"]["fg_signature"])
    c = _clusters(rows)
    assert c["ecru"] != c["grey"]


def test_two_garments_printed_on_one_pattern_grid_are_not_a_cutout_pair(tmp_path):
    """Trousers and a shirt with the same dots on the same canvas grid agree block for block and colour for colour
    where they overlap, and the shirt lies almost wholly inside the trousers (the demo's legacy tree has such a
    pair): two packshots are one picture only if their outlines agree too."""
    rows = _intake(tmp_path, {"trousers": dotted("trousers"), "shirt": dotted("shirt")})
    assert not foreground.cutout_match(rows["trousers"], rows["shirt"])
    assert not foreground.cutout_match(rows["shirt"], rows["trousers"])
    c = _clusters(rows)
    assert c["trousers"] != c["shirt"]


def _street(n: int) -> list[Path]:
    if not REAL.is_dir():
        pytest.skip("../shared/realdata is not beside the checkout")
    return sorted((REAL / "street").glob("street_schp_g*.jpg"))[:n]  # people in everyday scenes (busy backgrounds)


def test_a_cutout_of_a_real_photo_and_the_photo_are_one_cluster(tmp_path):
    photos = _street(3)
    assert len(photos) == 3
    files = {p.name: p.read_bytes() for p in photos}
    cut, share = cutout(files[photos[0].name])
    assert 0.1 < share < 0.6
    files["cutout.png"] = cut
    files["cutout-copy.jpg"] = reencoded(cut, 0.7, 85)  # the transparent PNG flattened to JPEG by someone else
    rows = _intake(tmp_path, files)
    assert "had_alpha" in rows["cutout.png"]["flags"]
    assert _ham(rows["cutout.png"], rows[photos[0].name]) > SHIPPED.hamming_threshold, "pHash alone misses it"
    c = _clusters(rows)
    assert c["cutout.png"] == c[photos[0].name] == c["cutout-copy.jpg"]
    assert len({c[p.name] for p in photos}) == 3, "the other photographs stay distinct"


def test_a_cutout_of_a_legacy_photo_is_contamination(tmp_path):
    photos = _street(2)
    legacy = _intake(tmp_path / "legacy", {p.name: p.read_bytes() for p in photos})
    index = schemas.from_rows([{**r, "source": "fashion200k", "path": n, "item_id": n, "stamp": "x"}
                               for n, r in legacy.items()], schemas.CONTAMINATION_INDEX)
    cut, _ = cutout(photos[1].read_bytes())
    new = _intake(tmp_path / "new", {"cut": cut, "fresh": packshot((10, 120, 200), 0.4)})
    found = find_contamination(schemas.from_rows(list(new.values()), schemas.IMAGES), index,
                               SHIPPED.hamming_threshold, **SHIPPED.match).to_pylist()
    assert [(r["image_sha256"], r["kind"], r["matched_path"]) for r in found] == [
        (new["cut"]["image_sha256"], "cutout", photos[1].name)]


def test_known_real_pairs_stay_found_and_nothing_else_merges(tmp_path):
    """All real photos through the intake and the shipped rule: the hopper encodings are one cluster, the
    byte-identical street pair one image, the garment and its wearer (different photos) stay apart."""
    if not REAL.is_dir():
        pytest.skip("../shared/realdata is not beside the checkout")
    files = {f"{p.parent.name}/{p.name}": p.read_bytes()
             for d in ("studio", "street", "odd") for p in sorted((REAL / d).iterdir())}
    refs = [ImageRef("drop_item", n, 0, n, "test", T0) for n in files]
    res = take_in(refs, files.__getitem__, LocalStore(tmp_path / "store"), ImageConfig())
    sha_of = {r["owner_id"]: r["image_sha256"] for r in res.refs if r["status"] == "accepted"}
    got = {r["image_sha256"]: r["cluster_id"]
           for r in dedup.cluster(res.images, SHIPPED.hamming_threshold, **SHIPPED.match)}
    clusters: dict[str, set[str]] = {}
    for name, sha in sha_of.items():
        clusters.setdefault(got[sha], set()).add(name)
    multi = sorted(sorted(v) for v in clusters.values() if len(v) > 1)
    hopper = sorted(n for n in sha_of if "pillow_hopper" in n)
    assert len(hopper) == 7
    assert multi == sorted([hopper, ["street/model-studio_catvton_049713_0.jpg",
                                     "street/model-studio_ootd_049713_0.jpg"]])
