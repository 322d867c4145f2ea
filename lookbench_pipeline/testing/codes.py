"""Synthetic 64-bit pHash sets for the near-duplicate search's tests and benchmark (lookbench_pipeline.hamming).

* :func:`uniform_codes`: independent uniform bits, a share of them replaced by near copies of others;
* :func:`clustered_codes`: what pHashes of packshots look like — bits that are biased and correlated (the
  low-frequency DCT signs of pictures that share a white background and a centred garment), families of near
  copies of one picture (re-encodes, resizes, crops, colour variants: 0 to 6 bits apart, most 0 to 2) and a few
  popular "templates" (one shop's packshot layout) that many codes sit close to.

Both are seeded and return ``uint64`` arrays of exactly ``n`` codes in random order.
"""

from __future__ import annotations

import numpy as np

_BITS = np.arange(64, dtype=np.uint64)


def _pack(bits: np.ndarray) -> np.ndarray:
    """(n, 64) booleans, column k = bit k -> uint64 (n,)."""
    out = np.zeros(len(bits), dtype=np.uint64)
    for k in range(64):
        out |= bits[:, k].astype(np.uint64) << _BITS[k]
    return out


def _flips(rng: np.random.Generator, k: int, counts: np.ndarray, chunk: int = 200_000) -> np.ndarray:
    """``k`` uint64 masks, mask i with ``counts[i]`` distinct random bits set (``counts <= 64``)."""
    out = np.zeros(k, dtype=np.uint64)
    for s in range(0, k, chunk):
        c = counts[s:s + chunk]
        ranks = np.argsort(rng.random((len(c), 64)), axis=1)  # a random permutation of the bits per row
        out[s:s + chunk] = _pack(ranks < c[:, None])
    return out


def near_copies(rng: np.random.Generator, src: np.ndarray, max_flips: int = 6) -> np.ndarray:
    """A near copy of each code of ``src``: 0 to ``max_flips`` random bits flipped, small counts likelier
    (weights 1 / (1 + flips))."""
    w = 1.0 / (1.0 + np.arange(max_flips + 1))
    counts = rng.choice(max_flips + 1, size=len(src), p=w / w.sum())
    return src ^ _flips(rng, len(src), counts)


def uniform_codes(n: int, seed: int = 1, near_share: float = 0.05) -> np.ndarray:
    """``n`` codes: uniform random bits, ``near_share`` of them near copies (1 to 6 bits) of the others."""
    rng = np.random.default_rng(seed)
    k = int(n * near_share)
    base = rng.integers(0, 2**64 - 1, size=n - k, dtype=np.uint64, endpoint=True)
    counts = rng.integers(1, 7, size=k)
    copies = base[rng.integers(0, max(1, n - k), size=k)] ^ _flips(rng, k, counts) if k and n > k else \
        np.zeros(0, np.uint64)
    out = np.concatenate([base, copies])
    return out[rng.permutation(len(out))]


def clustered_codes(n: int, seed: int = 1, latent: int = 12, templates: int = 50, family_share: float = 0.3,
                    template_share: float = 1 / 3, chunk: int = 250_000) -> np.ndarray:
    """``n`` codes shaped like pHashes of packshots.

    Pictures: ``bit_k = [a_k . z + b_k + noise > 0]`` with ``z`` a ``latent``-dimensional Gaussian (what a picture
    looks like at low frequency), ``a_k`` random loadings and ``b_k`` a per-bit bias drawn so that some bits are
    less balanced (set in 19% to 82% of codes; the pHash's first, DC-like bit in 99%), and ``z`` drawn around one of
    ``templates`` popular layouts for ``template_share`` of the pictures (a third by default). Calibrated on the
    pHashes of the real photos in ``../shared/realdata/images`` (distinct pictures: mean distance 30.8 bits, 1st / 5th
    percentile 20 / 24, bits set in 31% to 75% of codes, the first in all): here the mean is 29.8 bits, the
    percentiles 19 / 22 — a little more clustered than those photos. Then ``family_share`` of the codes are near
    copies (:func:`near_copies`) of an earlier picture, in families of geometric size (mean 3).
    """
    rng = np.random.default_rng(seed)
    loadings = rng.normal(size=(latent, 64))
    bias = rng.normal(scale=0.5, size=64)
    bias[63] = 6.0
    centres = rng.normal(size=(templates, latent))
    n_fam = int(n * family_share)
    n_pic = n - n_fam
    pics = []
    for s in range(0, n_pic, chunk):
        m = min(chunk, n_pic - s)
        z = rng.normal(size=(m, latent))
        tpl = rng.random(m) < template_share
        z[tpl] = centres[rng.integers(0, templates, size=int(tpl.sum()))] + 0.8 * z[tpl]
        logits = z @ loadings / np.sqrt(latent) + bias + rng.normal(size=(m, 64))
        pics.append(_pack(logits > 0))
    pic = np.concatenate(pics) if pics else np.zeros(0, np.uint64)
    if n_fam and n_pic:
        # family members: a few pictures get several copies (geometric family sizes, mean 3)
        heads = rng.integers(0, n_pic, size=max(1, n_fam // 3))
        sizes = rng.geometric(1 / 3, size=len(heads))
        src = np.repeat(heads, sizes)[:n_fam]
        if len(src) < n_fam:
            src = np.concatenate([src, rng.integers(0, n_pic, size=n_fam - len(src))])
        fam = near_copies(rng, pic[src])
    else:
        fam = np.zeros(0, np.uint64)
    out = np.concatenate([pic, fam])
    return out[rng.permutation(len(out))]
