"""How well the reference check of the AI-generated subsets separates faithful pictures from wrong ones.

    .venv/bin/python benchmarks/aigen_check.py [--products 48] [--seed 7] [--size 1024]

For every garment of the demo shop (``demo_shop.plan(products, 0, seed)``, the packshot as the reference), the
scripted endpoint's painter draws a studio shot and a street outfit three ways: faithful (``good``), another garment
(``off_product``) and the same garment recoloured (``recolour``). Each picture goes through the check exactly as
the pipeline runs it (``aigen.reference_check.prepare_reference``, ``locate``, ``PixelColourAnnotator``,
``compare_attributes``) against the garment's true colour and pattern, with the default thresholds. Printed: the
acceptance rate per kind and drawing, the similarity quartiles, and the reasons of the faithful pictures that are
rejected.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from lookbench_pipeline.demo import aigen_server
from lookbench_pipeline.aigen.reference_check import (PixelColourAnnotator, compare_attributes, locate,
                                                      prepare_reference)
from lookbench_pipeline.config import AigenCheckConfig
from lookbench_pipeline.demo.shop import packshot, plan
from lookbench_pipeline.embed import HsvHogEmbedder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--products", type=int, default=48)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    chk = AigenCheckConfig()
    emb, ann = HsvHogEmbedder(), PixelColourAnnotator()
    products, _ = plan(args.products, 0, args.seed)
    results: dict[tuple[str, str], list] = {}
    t0, n = time.perf_counter(), 0
    for i, p in enumerate(products):
        ref = packshot(p)
        r = prepare_reference(ref, emb)
        truth = {"color": p.color, "pattern": p.pattern}
        for kind in ("studio", "street"):
            prompt = (f"{'Street-style photograph' if kind == 'street' else 'Lifestyle studio photograph'} of a "
                      f"{p.title.lower()}")
            for behaviour in ("good", "off_product", "recolour"):
                img = aigen_server.paint(kind, prompt, 1000 + i, (args.size, args.size), behaviour, ref)
                m = locate(r, img, emb)
                compared, agreed, bad = compare_attributes(ann.label(m.pixels), truth)
                fails = []
                if compared == 0:
                    fails.append("no_attribute_to_compare")
                elif agreed / compared < chk.min_attribute_agreement:
                    fails.append("attribute_disagreement:" + ",".join(bad))
                if m.similarity < chk.min_similarity:
                    fails.append("similarity_below_threshold")
                results.setdefault((kind, behaviour), []).append((not fails, m.similarity, fails, p))
                n += 1
    dt = time.perf_counter() - t0
    print(f"{args.products} demo garments (seed {args.seed}), {args.size}x{args.size} pixels, embedder "
          f"{emb.model_id}, min_similarity {chk.min_similarity}, min_attribute_agreement "
          f"{chk.min_attribute_agreement}; {n} pictures drawn and checked in {dt:.0f} s")
    print(f"{'kind':8s} {'drawing':12s} {'accepted':>10s}   similarity quartiles")
    for (kind, behaviour), rows in results.items():
        acc = sum(r[0] for r in rows)
        q = np.percentile([r[1] for r in rows], [25, 50, 75])
        print(f"{kind:8s} {behaviour:12s} {acc:4d}/{len(rows):<4d}   {q[0]:.3f} {q[1]:.3f} {q[2]:.3f}")
    why = Counter()
    for (kind, behaviour), rows in results.items():
        if behaviour == "good":
            for ok, sim, fails, p in rows:
                if not ok:
                    why[f"{';'.join(fails)} ({p.color} {p.pattern})"] += 1
    print("faithful pictures rejected:", dict(why.most_common()))
    wrong = [r[1] for (k, b), rows in results.items() if b != "good" for r in rows]
    good = [r[1] for (k, b), rows in results.items() if b == "good" for r in rows]
    print(f"similarity: faithful min {min(good):.3f}, 5th pct {np.percentile(good, 5):.3f}; wrong max "
          f"{max(wrong):.3f}, 95th pct {np.percentile(wrong, 95):.3f}")


if __name__ == "__main__":
    main()
