"""Duplicate detection on the real photos, with the pipeline's own intake and rule and the shipped configuration.

    .venv/bin/python benchmarks/dedup_realdata.py [--realdata ../shared/realdata] [--without-foreground]

``--without-foreground`` scores the rule as it was before the foreground checks (no foreground colour check, no
cut-out matching), for comparison.

Every file under images/{studio,street,odd} goes through the intake (`images.take_in`: decode, pHash, colour and
foreground signatures, block codes) and `dedup.cluster` with `DedupConfig()` (threshold, colour, foreground colour,
cut-outs). Three sets of inputs, scored as pairs (two images are "found" when they end in one cluster):

1. the real photos as they are. Established duplicates: the byte-identical street pair named in realdata/README.md
   and Pillow's seven "hopper" encodings; every other pair of files is taken as distinct (different photos from
   different data sets, the garment-and-wearer pairs included);
2. the real photos plus a resized (0.5x), re-encoded (JPEG quality 60) copy of each: each copy must join its photo;
3. the real street photos plus a background-removed cut-out of each (tests/dedup_inputs.cutout: GrabCut, background
   transparent, PNG on the same canvas): each cut-out must join its photo; cut-outs whose subject is too small to
   be matched (fewer than foreground.MIN_INTERIOR_BLOCKS textured blocks inside it) are counted apart;
4. colour variants of a small garment on white (tests/dedup_inputs.packshot: 8 colours x side shares 10-40%): every
   pair of colours must stay apart and each variant's re-encoded copy must join it (the same colour at another size,
   a zoomed copy of the same packshot, is counted apart: merged or not, either is right);
5. edited copies, one edit at a time: the real studio and street photos plus one copy of each with that edit
   (:func:`edited`: cropped 2 / 5 / 10% on every side, mirrored, rotated 90 degrees, greyscale stored as RGB and as
   a one-channel file, JPEG quality 60 at full size): which edits the rule treats as the same picture. Not a target:
   what the pHash rule is blind to, so the docs can say which copies dedup and the contamination check (the same
   rule) miss;
6. the contamination check (``contamination.update_index`` over a ``folder`` source of the real studio and street
   photos, then ``find_contamination`` with the shipped rule) on the same edited copies: how many are found as
   leaks of their own photo, and with which ``kind`` (``mirrored``: the index's mirror signatures).

Precision = found pairs that are established / found pairs; recall = established pairs found / established pairs.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from dedup_inputs import cutout, packshot, reencoded  # noqa: E402

from lookbench_pipeline import dedup, foreground  # noqa: E402
from lookbench_pipeline.config import DedupConfig, ImageConfig  # noqa: E402
from lookbench_pipeline.images import ImageRef, take_in  # noqa: E402
from lookbench_pipeline.store import LocalStore  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
RULE = DedupConfig()


EDITS = ("crop 2%", "crop 5%", "crop 10%", "mirrored", "rotated 90", "greyscale", "greyscale file", "jpeg q60")


def edited(data: bytes, how: str) -> bytes:
    """A copy of the picture as it is shown (EXIF orientation applied) with one edit of :data:`EDITS`, as JPEG
    quality 90 (quality 60 for ``jpeg q60``), the same size but for the crops. ``greyscale`` is stored as an RGB
    JPEG (three equal channels), ``greyscale file`` as a one-channel JPEG (flagged ``grayscale`` by the intake)."""
    import io

    from PIL import Image, ImageOps

    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    if how.startswith("crop"):
        f = int(how.split()[1].rstrip("%")) / 100
        w, h = im.size
        im = im.crop((round(w * f), round(h * f), w - round(w * f), h - round(h * f)))
    elif how == "mirrored":
        im = ImageOps.mirror(im)
    elif how == "rotated 90":
        im = im.transpose(Image.Transpose.ROTATE_90)
    elif how == "greyscale":
        im = ImageOps.grayscale(im).convert("RGB")
    elif how == "greyscale file":
        im = ImageOps.grayscale(im)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=60 if how == "jpeg q60" else 90)
    return buf.getvalue()


def clusters(files: dict[str, bytes], store: LocalStore) -> tuple[dict[str, str], dict[str, dict], dict[str, str]]:
    """name -> cluster id, name -> images row, name -> rejection reason."""
    res = take_in([ImageRef("drop_item", n, 0, n, "bench", T0) for n in files], files.__getitem__, store, ImageConfig())
    cfg = RULE
    by_sha = {r["image_sha256"]: r["cluster_id"] for r in dedup.cluster(res.images, cfg.hamming_threshold, **cfg.match)}
    rows = {r["image_sha256"]: r for r in res.images}
    ok = {r["owner_id"]: r["image_sha256"] for r in res.refs if r["status"] == "accepted"}
    return ({n: by_sha[s] for n, s in ok.items()}, {n: rows[s] for n, s in ok.items()},
            {r["owner_id"]: r["reason"] for r in res.refs if r["status"] != "accepted"})


def pairs_found(cl: dict[str, str]) -> set[frozenset[str]]:
    groups: dict[str, list[str]] = {}
    for n, c in cl.items():
        groups.setdefault(c, []).append(n)
    return {frozenset(p) for g in groups.values() for p in itertools.combinations(sorted(g), 2)}


def score(name: str, found: set, truth: set, scope: set | None = None) -> None:
    """Print precision / recall; ``scope``: only pairs that touch these names count as found."""
    if scope is not None:
        found = {p for p in found if p & scope}
    tp = found & truth
    print(f"| {name} | {len(truth)} | {len(found)} | {len(tp)} | {len(tp) / max(len(found), 1):.1%} | "
          f"{len(tp) / max(len(truth), 1):.1%} |")
    for p in sorted(found - truth, key=sorted)[:10]:
        print("  false positive:", sorted(p), file=sys.stderr)
    for p in sorted(truth - found, key=sorted)[:10]:
        print("  missed:", sorted(p), file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared/realdata"))
    ap.add_argument("--tmp", default="/tmp/lookbench-dedup-bench")
    ap.add_argument("--without-foreground", action="store_true")
    args = ap.parse_args()
    global RULE
    if args.without_foreground:
        RULE = DedupConfig(max_foreground_delta_e=float("inf"), cutouts=False)
    import shutil

    shutil.rmtree(args.tmp, ignore_errors=True)
    store = LocalStore(Path(args.tmp) / "store")
    root = Path(args.realdata) / "images"
    real = {f"{d}/{p.name}": p.read_bytes() for d in ("studio", "street", "odd") for p in sorted((root / d).iterdir())}
    t = time.perf_counter()
    print(f"rule: {RULE}")
    print("| input | established pairs | found pairs | true positives | precision | recall |")
    print("|---|---|---|---|---|---|")

    cl, rows, rejected = clusters(real, store)
    hopper = sorted(n for n in cl if "pillow_hopper" in n)
    truth = {frozenset(p) for p in itertools.combinations(hopper, 2)}
    truth.add(frozenset({"street/model-studio_catvton_049713_0.jpg", "street/model-studio_ootd_049713_0.jpg"}))
    score(f"real photos ({len(cl)} decoded, {len(rejected)} rejected)", pairs_found(cl), truth)

    copies = {**real, **{f"copy/{n}": reencoded(b) for n, b in real.items() if n in cl}}
    cl2, _, _ = clusters(copies, store)
    truth2 = truth | {frozenset({n, f"copy/{n}"}) for n in cl} | {
        frozenset({f"copy/{a}", f"copy/{b}"}) for a, b in map(sorted, truth)} | {
        frozenset({a, f"copy/{b}"}) for p in truth for a, b in itertools.permutations(sorted(p))}
    score("+ a resized, re-encoded copy of each", pairs_found(cl2), truth2)

    street = {n: b for n, b in real.items() if n.startswith("street/") and n in cl}
    cuts = {f"cutout/{n}": cutout(b)[0] for n, b in street.items()}
    cl3, rows3, _ = clusters({**street, **cuts}, store)
    small = {c for c in cuts if c in rows3 and int((foreground._inside(rows3[c]["block_codes"])
                                                     & (foreground._codes(rows3[c]["block_codes"]) != 0)).sum())
             < foreground.MIN_INTERIOR_BLOCKS}
    same = truth & {frozenset(p) for p in itertools.combinations(street, 2)}
    own = {frozenset({c, c.removeprefix("cutout/")}) for c in cuts}
    truth3 = same | own | {frozenset({f"cutout/{a}", f"cutout/{b}"}) for a, b in map(sorted, same)} | {
        frozenset({f"cutout/{a}", b}) for p in same for a, b in itertools.permutations(sorted(p))}
    found3 = pairs_found(cl3)
    score(f"street photos + a cut-out of each ({len(cuts)})", found3, truth3)
    big = own - {p for p in own if p & small}
    print(f"|   cut-outs whose subject has >= {foreground.MIN_INTERIOR_BLOCKS} textured inside blocks | {len(big)} | | "
          f"{len(big & found3)} | | {len(big & found3) / max(len(big), 1):.1%} |")

    colours = {"red": (200, 30, 40), "blue": (35, 60, 190), "green": (40, 140, 60), "black": (25, 25, 28),
               "navy": (30, 35, 80), "ecru": (240, 232, 214), "grey": (150, 150, 150), "pink": (235, 160, 185)}
    variants = {}
    for share in (0.10, 0.15, 0.25, 0.40):
        for c, rgb in colours.items():
            b = packshot(rgb, share)
            variants[f"{share:.2f}/{c}"] = b
            variants[f"{share:.2f}/{c}/copy"] = reencoded(b)
    cl4, _, _ = clusters(variants, store)
    colour_of = {n: n.split("/")[1] for n in variants}
    truth4 = {frozenset({n, f"{n}/copy"}) for n in variants if not n.endswith("/copy")}
    found4 = pairs_found(cl4)
    zoomed = {p for p in found4 - truth4 if len({colour_of[n] for n in p}) == 1}
    score(f"colour variants of a small garment on white ({len(variants) // 2}: 8 colours x 4 sizes) + a copy of each",
          found4 - zoomed, truth4)
    print(f"|   pairs of two different colours merged | | {len(found4 - truth4 - zoomed)} | | | |")
    print(f"|   (not scored) the same colour at another size merged: a zoomed copy, either way is right | | "
          f"{len(zoomed)} | | | |")

    photos = {n: b for n, b in real.items() if n.split("/")[0] in ("studio", "street") and n in cl}
    print(f"\nedited copies: the {len(photos)} real studio and street photos plus one edited copy of each, one edit "
          "per run")
    print("| edit | copies joined to their photo | recall | pairs of two different photos merged |")
    print("|---|---|---|---|")
    for how in EDITS:
        cl5, _, _ = clusters({**photos, **{f"edit/{n}": edited(b, how) for n, b in photos.items()}}, store)
        found5 = pairs_found(cl5)
        joined = sum(frozenset({n, f"edit/{n}"}) in found5 for n in photos)
        same5 = truth | {frozenset({f"edit/{a}", f"edit/{b}"}) for a, b in map(sorted, truth)} | {
            frozenset({a, f"edit/{b}"}) for p in truth for a, b in itertools.permutations(sorted(p))}
        wrong = {p for p in found5 - same5 if len({n.removeprefix("edit/") for n in p}) == 2}
        print(f"| {how} | {joined} of {len(photos)} | {joined / len(photos):.1%} | {len(wrong)} |")

    from collections import Counter

    from lookbench_pipeline import contamination, schemas
    from lookbench_pipeline.config import LegacySource

    legacy = Path(args.tmp) / "legacy"
    legacy.mkdir(parents=True)
    for n in photos:
        (legacy / n.replace("/", "__")).write_bytes(photos[n])
    index, _ = contamination.update_index(Path(args.tmp) / "index.parquet",
                                          [LegacySource(name="legacy", kind="folder", path=legacy)])
    print(f"\ncontamination: an index of the {index.num_rows} photos (a `folder` source), and one edited copy of each "
          "as the new images")
    print("| edit | copies found as a leak of their own photo | kinds | copies matched to another photo |")
    print("|---|---|---|---|")
    for how in EDITS:
        files = {f"edit/{n}": edited(b, how) for n, b in photos.items()}
        res = take_in([ImageRef("drop_item", n, 0, n, "bench", T0) for n in files], files.__getitem__, store,
                      ImageConfig())
        found = contamination.find_contamination(schemas.from_rows(res.images, schemas.IMAGES), index,
                                                 RULE.hamming_threshold, RULE.max_color_diff,
                                                 RULE.max_foreground_delta_e, RULE.cutouts).to_pylist()
        name_of = {r["image_sha256"]: r["owner_id"].removeprefix("edit/") for r in res.refs
                   if r["status"] == "accepted"}
        twins = {n for p in truth for n in p}  # the byte-identical pair: either photo is its own
        own = [r for r in found if r["matched_path"] == name_of[r["image_sha256"]].replace("/", "__")
               or (name_of[r["image_sha256"]] in twins and r["matched_path"].replace("__", "/") in twins)]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(Counter(r["kind"] for r in own).items()))
        ids = {id(r) for r in own}
        wrong = [r for r in found if id(r) not in ids]  # a match to a photo that is not the copy's own
        for r in wrong[:10]:
            print("  wrong match:", name_of[r["image_sha256"]], "->", r["matched_path"], r["kind"], file=sys.stderr)
        print(f"| {how} | {len({r['image_sha256'] for r in own})} of {len(name_of)} | {kinds} | {len(wrong)} |")
    print(f"\n{time.perf_counter() - t:.0f} s wall")


if __name__ == "__main__":
    main()
