"""Near-duplicate search and clustering."""

from datetime import datetime, timedelta, timezone

import numpy as np

from lookbench_pipeline.dedup import cluster, near_pairs, popcount64


def test_near_pairs_equal_brute_force():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2**63, size=300, dtype=np.uint64)
    # plant near duplicates by flipping a few bits
    flips = np.array([np.uint64(1) << np.uint64(b) for b in rng.integers(0, 64, size=150)], dtype=np.uint64)
    h = np.concatenate([base, base[:150] ^ flips])
    got = {(int(i), int(j), int(d)) for i, j, d in near_pairs(h, 8, chunk=64)}
    want = set()
    for i in range(len(h)):
        for j in range(i + 1, len(h)):
            d = bin(int(h[i]) ^ int(h[j])).count("1")
            if d <= 8:
                want.add((i, j, d))
    assert got == want and len(want) >= 150


def test_popcount():
    x = np.array([0, 1, 2**64 - 1, 0xF0F0], dtype=np.uint64)
    assert popcount64(x).tolist() == [0, 1, 64, 8]


def _img(sha, phash, first, w=100, h=100, flags=(), sig=None):
    return {"image_sha256": sha, "phash": phash, "first_seen_at": first, "width": w, "height": h,
            "flags": list(flags), "color_signature": sig}


def test_cluster_representative_is_earliest_then_largest():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    imgs = [_img("b", "ffff000000000000", t0 + timedelta(days=1), 500, 500),
            _img("a", "ffff000000000001", t0, 100, 100),
            _img("c", "ffff000000000003", t0, 200, 200),
            _img("z", "0000ffffffffffff", t0)]
    rows = {r["image_sha256"]: r for r in cluster(imgs, 4)}
    assert rows["a"]["cluster_id"] == rows["b"]["cluster_id"] == rows["c"]["cluster_id"] == "c"
    assert rows["c"]["is_representative"] and rows["z"]["duplicate_kind"] == "unique"


def test_uniform_and_colour_variants_not_merged():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    red = ("c80a0a" * 64)
    blue = ("0a0ac8" * 64)
    imgs = [_img("u1", "8000000000000000", t0, flags=["uniform"]), _img("u2", "8000000000000000", t0, flags=["uniform"]),
            _img("r", "123456789abcdef0", t0, sig=red), _img("b", "123456789abcdef0", t0, sig=blue),
            _img("r2", "123456789abcdef1", t0, sig=red)]
    rows = {r["image_sha256"]: r["cluster_id"] for r in cluster(imgs, 6)}
    assert rows["u1"] != rows["u2"]
    assert rows["r"] != rows["b"]
    assert rows["r"] == rows["r2"]


def test_mih_equals_brute_force_with_planted_pairs():
    from lookbench_pipeline.dedup import near_pairs_mih
    from lookbench_pipeline.hamming import plan

    rng = np.random.default_rng(3)
    n, k = 5000, 800
    h = rng.integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(2)
    flips = np.zeros(k, dtype=np.uint64)
    for _ in range(5):
        flips |= np.uint64(1) << rng.integers(0, 64, size=k).astype(np.uint64)
    h = np.concatenate([h, h[:k] ^ flips])
    for radius in (0, 3, 8, 10):
        assert np.array_equal(near_pairs_mih(h, radius), near_pairs(h, radius)), radius
    for n_, r in ((20_000, 8), (1_000_000, 8), (1_000_000, 12)):
        p = plan(n_, r)  # substring tables whose thresholds cover the radius (pigeonhole): exact
        assert not p.brute_force and sum(t + 1 for _, t in p.tables) >= r + 1


def _flat(rgb: tuple[int, int, int]) -> str:
    """An 8 x 8 colour signature of one colour."""
    return bytes(rgb * 64).hex()


def _partitions(imgs: list[dict]) -> set[frozenset]:
    """The clusters of every input order of ``imgs`` (sets of sha256)."""
    import itertools

    out = set()
    for order in itertools.permutations(imgs):
        by: dict[str, set[str]] = {}
        for r in cluster(list(order), 6, 32.0, 6.0, cutouts=False):
            by.setdefault(r["cluster_id"], set()).add(r["image_sha256"])
        out.add(frozenset(frozenset(v) for v in by.values()))
    return out


def test_a_greyscale_cluster_holding_a_colour_joins_no_other_colour():
    """A tinted original C, its grey copy stored as RGB R (6 bits away), a greyscale file G of R (6 more bits: 12
    from C, never compared with it) and a pink P of G's grey level with G's pHash. G matches P by grey level, but
    its cluster holds C already (through R): joining P would merge two colours that do not agree."""
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    c = _img("C", f"{0xFFF:016x}", t0, sig=_flat((150, 145, 138)))
    r = _img("R", f"{0x03F:016x}", t0, sig=_flat((146, 146, 146)))
    g = _img("G", f"{0:016x}", t0, flags=("grayscale",), sig=_flat((146, 146, 146)))
    p = _img("P", f"{0:016x}", t0, sig=_flat((185, 128, 130)))
    from lookbench_pipeline.dedup import confirmed_by_colour

    assert confirmed_by_colour(g, p, 32.0, 6.0) and not confirmed_by_colour(c, p, 32.0, 6.0)
    assert _partitions([c, r, g, p]) == {frozenset({frozenset("CRG"), frozenset("P")})}


def test_copies_in_one_hash_group_cost_one_colour_check(monkeypatch):
    """Thousands of copies of one picture (one pHash, one colour key) are one cluster after one colour check, and
    two colours of one pHash after three (each with itself, then the pair): not one per member or per pair."""
    from lookbench_pipeline import dedup

    calls = []
    real = dedup.confirmed_by_colour
    monkeypatch.setattr(dedup, "confirmed_by_colour", lambda *a: calls.append(1) or real(*a))
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    red = [_img(f"r{k}", "00000000000000ff", t0, sig=_flat((200, 30, 40))) for k in range(3000)]
    blue = [_img(f"b{k}", "00000000000000ff", t0, sig=_flat((35, 60, 190))) for k in range(3000)]
    got = cluster(red + blue, 6, 32.0, 6.0, cutouts=False)
    assert len({r["cluster_id"] for r in got}) == 2
    assert len(calls) == 3


def test_p90_is_numpys_90th_percentile():
    from lookbench_pipeline.dedup import p90

    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 10, 64, 191, 192):
        for _ in range(200):
            for d in (rng.integers(0, 256, n).astype(np.int16), rng.random(n) * 255):
                assert p90(d) == float(np.percentile(d, 90))


def test_a_small_coloured_foreground_is_not_a_grey_picture():
    """A red and a blue shirt so small on white that every cell of the 8 x 8 colour signature is grey: their
    foreground signatures still say red and blue, so they are pictures in colour, and a greyscale file that matches
    both by grey level (82 and 81) joins neither, instead of merging them in the first phase."""
    from lookbench_pipeline.dedup import achromatic, confirmed_by_colour
    from lookbench_pipeline.foreground import srgb_to_lab

    def fg(rgb):  # one cell a quarter foreground of this colour, on a white, uniform background
        lab = srgb_to_lab(np.array([rgb], np.float32))[0]
        cell = np.clip(np.rint([64, lab[0] * 2.55, lab[1] + 128, lab[2] + 128]), 0, 255).astype(np.uint8)
        return (bytes([1, 255, 128, 128]) + bytes(cell) + bytes(4 * 63)).hex()

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    white = bytes((252, 251, 251) * 64).hex()
    red = dict(_img("R", "00000000000000ff", t0, sig=white), fg_signature=fg((200, 30, 40)))
    blue = dict(_img("B", "00000000000000ff", t0, sig=white), fg_signature=fg((40, 72, 232)))
    grey = dict(_img("G", "00000000000000ff", t0, flags=("grayscale",), sig=bytes((251,) * 192).hex()),
                fg_signature=fg((82, 82, 82)))
    assert achromatic(red["color_signature"]) and achromatic(blue["color_signature"])
    assert not confirmed_by_colour(red, blue, 32.0, 6.0)
    assert confirmed_by_colour(grey, red, 32.0, 6.0) and confirmed_by_colour(grey, blue, 32.0, 6.0)
    assert _partitions([red, blue, grey]) == {frozenset({frozenset("R"), frozenset("B"), frozenset("G")})}
