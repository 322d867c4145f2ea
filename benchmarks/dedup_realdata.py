"""Duplicate detection on the real photos: precision and recall on the pairs that can be established.

    .venv/bin/python benchmarks/dedup_realdata.py [--realdata ../shared/realdata] [--threshold 6]

Every file under images/{studio,street,odd} goes through the intake decode and pHash; pairs are found with the
pipeline's own rule (sha256 equal, or pHash within the threshold and colour-confirmed). Established duplicate
pairs: the byte-identical street pair named in realdata/README.md, and the "hopper" test picture that Pillow
ships in seven encodings (GIF, WebP, greyscale JPEG, EXIF orientations 3/6/8, WebP orientation 6). Every other
pair of files is taken as distinct (they are different photos from different data sets); a found pair outside
the established set counts as a false positive.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
from pathlib import Path


from lookbench_pipeline.dedup import confirmed_by_colour, hex_to_u64, near_pairs_mih
from lookbench_pipeline.images import PHASH_WORK_SIDE, ImageRejected, color_signature, decode, phash_hex


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared/realdata"))
    ap.add_argument("--threshold", type=int, default=6)
    ap.add_argument("--max-color-diff", type=float, default=32.0)
    args = ap.parse_args()
    root = Path(args.realdata) / "images"
    rows, rejected = [], []
    for f in sorted(p for d in ("studio", "street", "odd") for p in (root / d).iterdir()):
        data = f.read_bytes()
        try:
            dec = decode(data, work_side=PHASH_WORK_SIDE)
        except ImageRejected as exc:
            rejected.append((f.name, exc.reason))
            continue
        rows.append({"name": f"{f.parent.name}/{f.name}", "sha": hashlib.sha256(data).hexdigest(),
                     "phash": phash_hex(dec.rgb), "color_signature": color_signature(dec.rgb), "flags": dec.flags})
    hopper = [r["name"] for r in rows if "pillow_hopper" in r["name"]]
    truth = {frozenset(p) for p in itertools.combinations(hopper, 2)}
    truth.add(frozenset({"street/model-studio_catvton_049713_0.jpg", "street/model-studio_ootd_049713_0.jpg"}))
    found = set()
    for i, j, _ in near_pairs_mih(hex_to_u64([r["phash"] for r in rows]), args.threshold):
        a, b = rows[i], rows[j]
        if "uniform" in a["flags"] or "uniform" in b["flags"]:
            continue
        if a["sha"] == b["sha"] or confirmed_by_colour(a, b, args.max_color_diff):
            found.add(frozenset({a["name"], b["name"]}))
    tp = found & truth
    print(f"images decoded: {len(rows)}; rejected: {rejected}")
    print(f"established pairs: {len(truth)}; found: {len(found)}; true positives: {len(tp)}")
    print(f"precision {len(tp) / max(len(found), 1):.1%}, recall {len(tp) / len(truth):.1%} "
          f"(threshold {args.threshold} bits, colour diff <= {args.max_color_diff})")
    for p in sorted(found - truth, key=sorted):
        print("  false positive:", sorted(p))
    for p in sorted(truth - found, key=sorted):
        print("  missed:", sorted(p))


if __name__ == "__main__":
    main()
