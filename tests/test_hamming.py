"""The exact Hamming self-join (lookbench_pipeline.hamming) against brute force, on uniform and clustered codes."""

import numpy as np
import pytest

from lookbench_pipeline import hamming
from lookbench_pipeline.dedup import near_pairs, near_pairs_mih
from lookbench_pipeline.hamming import MAX_KEY_BITS, Plan, pairs_within, plan, search
from lookbench_pipeline.testing.codes import clustered_codes, near_copies, uniform_codes


def brute(h: np.ndarray, radius: int) -> np.ndarray:
    """Every pair compared in numpy (dedup.near_pairs, chunked), a reference independent of the numba kernels."""
    return near_pairs(np.asarray(h, dtype=np.uint64), radius, chunk=512)


@pytest.mark.parametrize("kind", ["uniform", "clustered"])
@pytest.mark.parametrize("radius", [0, 1, 3, 6, 8, 10, 16])
def test_equals_brute_force(kind, radius):
    h = uniform_codes(6000, seed=radius, near_share=0.2) if kind == "uniform" else clustered_codes(6000, seed=radius)
    got = pairs_within(h, radius)
    want = brute(h, radius)
    assert np.array_equal(got, want)
    if radius >= 6:
        assert len(want) >= 200  # the planted near copies are there to be found


def test_clustered_codes_have_many_pairs_and_skewed_bits():
    h = clustered_codes(12_000, seed=5)
    got = pairs_within(h, 8)
    assert np.array_equal(got, brute(h, 8))
    bits = np.array([((h >> np.uint64(b)) & np.uint64(1)).mean() for b in range(64)])
    assert bits[63] > 0.95 and bits.min() < 0.3  # biased bits, as pHashes of packshots have
    assert len(got) > 3000


def test_clustered_pictures_pair_by_chance_with_and_without_layouts():
    """Distinct pictures (copies off) still pair by chance, layouts or not (the close tail of a pHash-like
    distribution: BENCHMARKS.md, "Why a different clustered generator would not change this"); the layouts
    (``template_share``) add to it, and the same seed draws the same pictures when the share is left at its default."""
    with_layouts = clustered_codes(20_000, seed=4, family_share=0.0)
    without = clustered_codes(20_000, seed=4, family_share=0.0, template_share=0.0)
    assert np.array_equal(with_layouts, clustered_codes(20_000, seed=4, family_share=0.0, template_share=1 / 3))
    n_with, n_without = len(pairs_within(with_layouts, 8)), len(pairs_within(without, 8))
    assert 0 < n_without < n_with
    assert len(pairs_within(uniform_codes(20_000, seed=4, near_share=0.0), 8)) == 0  # uniform bits: ~0.05 expected


@pytest.mark.parametrize("n", [20_000])
def test_every_plan_shape_is_exact_on_clustered_codes(n):
    """Plans the cost model picks at other sizes (4 tables of 16 bits at mixed thresholds; 3 wide tables; tables
    that leave bits out; 9 tables at threshold 0), forced on one set: each is exact, and the first-table rule
    reports each pair once."""
    h = clustered_codes(n, seed=11)
    want = brute(h, 8)
    order = hamming.bit_entropy_order(h)
    shapes = [(4, 16, [2, 1, 1, 1]), (3, 21, [2, 2, 2]), (3, 12, [2, 2, 2]), (9, 7, [0] * 9), (2, 20, [4, 3])]
    for m, w, taus in shapes:
        for bit_order in (None, order):
            if bit_order is None:
                groups = [tuple(range(63 - k * w, 63 - (k + 1) * w, -1)) for k in range(m)]
            else:
                groups = [tuple(int(b) for b in bit_order[: m * w][k::m]) for k in range(m)]
            p = Plan(tuple(zip(groups, taus)), 0.0)
            assert np.array_equal(search(h, 8, p, threads=2), want), (m, w, taus)


def test_crowded_buckets_overflow_the_slots_and_the_gather_buffer():
    """Keys drawn from a handful of values: buckets far past the 8-slot copy, partners that fill the gather buffer
    (``_BUFFER`` codes) several times over, and codes sitting on a buffer boundary; the rest of the bits sparse, so
    that most pairs are within the radius. Same rows as brute force, each pair once."""
    rng = np.random.default_rng(21)
    n = 3 * hamming._BUFFER
    keys = rng.choice(np.array([0, 3, 0b101], dtype=np.uint64), size=n)  # 16-bit keys within 2 bits of each other
    low = np.zeros(n, dtype=np.uint64)
    for _ in range(4):  # up to 4 random bits set below the key
        low |= np.uint64(1) << rng.integers(0, 48, size=n).astype(np.uint64)
    h = (keys << np.uint64(48)) | low
    want = brute(h, 4)
    assert len(want) > n  # crowded: more pairs than codes
    p = Plan(((tuple(range(63, 47, -1)), 2), (tuple(range(47, 31, -1)), 1), (tuple(range(31, 15, -1)), 0)), 0.0)
    assert np.array_equal(search(h, 4, p, threads=2), want)
    assert np.array_equal(pairs_within(h, 4), want)


def _crowded_codes() -> tuple[np.ndarray, Plan]:
    rng = np.random.default_rng(21)
    n = 3 * hamming._BUFFER
    keys = rng.choice(np.array([0, 1, 3, 0b101], dtype=np.uint64), size=n)  # 1 and 2 bits apart: pairs through a
    low = np.zeros(n, dtype=np.uint64)  # crowded centre and through an empty one
    for _ in range(4):
        low |= np.uint64(1) << rng.integers(0, 48, size=n).astype(np.uint64)
    p = Plan(((tuple(range(63, 47, -1)), 2), (tuple(range(47, 31, -1)), 1), (tuple(range(31, 15, -1)), 0)), 0.0)
    return (keys << np.uint64(48)) | low, p


@pytest.mark.parametrize("kernel", ["ball", "bucket"])
def test_threshold_two_tables_by_centre_and_by_bucket_are_both_exact(monkeypatch, kernel):
    """A table at threshold 2 is joined centre by centre (``_join_ball``: each key's radius-1 ball gathered once)
    when that is cheaper, else bucket by bucket (``_join``); both are forced here on dense uniform codes, skewed
    codes in entropy order, tables that leave bits out, and crowded keys whose balls overflow the gather buffer (the
    ball kernel then compares in place). Same rows as brute force, and the forced kernel is the one that ran."""
    calls = {"ball": 0, "bucket": 0}
    real_ball, real_join = hamming._join_ball, hamming._join

    def ball(*a):
        calls["ball"] += 1
        return real_ball(*a)

    def join(*a):
        calls["bucket"] += 1
        return real_join(*a)

    monkeypatch.setattr(hamming, "_join_ball", ball)
    monkeypatch.setattr(hamming, "_join", join)
    monkeypatch.setattr(hamming, "_C_BALL", 0.0 if kernel == "ball" else float("inf"))
    u = uniform_codes(20_000, seed=4, near_share=0.3)
    c = clustered_codes(20_000, seed=6)
    crowded, crowded_plan = _crowded_codes()
    cases = [
        (u, 8, Plan(tuple((tuple(range(63 - 12 * k, 51 - 12 * k, -1)), 2) for k in range(3)), 0.0)),  # 28 bits unused
        (c, 8, None),
        (c, 5, Plan(tuple((tuple(int(b) for b in hamming.bit_entropy_order(c)[k:54:3]), 2) for k in range(2)), 0.0)),
        (crowded, 4, crowded_plan),
    ]
    for h, r, p in cases:
        if p is None:
            p = plan(len(h), r, hamming.bit_entropy_order(h))
            p = Plan(tuple((bits, 2) for bits, _ in p.tables[:3]), 0.0)  # the model's bits, every table at 2
        assert sum(t + 1 for _, t in p.tables) >= r + 1
        assert np.array_equal(search(h, r, p, threads=2), brute(h, r)), (r, [(len(b), t) for b, t in p.tables])
    assert calls[kernel] > 0
    if kernel == "bucket":
        assert calls["ball"] == 0


@pytest.mark.parametrize("case", ["crowded", "clustered", "brute"])
def test_a_full_output_buffer_is_continued_not_run_again(monkeypatch, case):
    """Every job starts with a one-row buffer: the kernels stop after the bucket, centre or row that overflowed it
    and the collector goes on from there with room for that unit's pairs (a crowded centre needs thousands). Same
    rows as brute force, each pair once, and the kernels did stop and go on."""
    calls = []  # per job: the number of kernel runs
    real = hamming._Collector.__call__

    def tiny(self, kernel, head, lo, hi, tail):
        self.hint = 1
        runs = [0]

        def counted(*args):
            runs[0] += 1
            return kernel(*args)

        got = real(self, counted, head, lo, hi, tail)
        calls.append(runs[0])
        return got

    monkeypatch.setattr(hamming._Collector, "__call__", tiny)
    if case == "crowded":
        h, p = _crowded_codes()
        r = 4
    elif case == "clustered":
        h, r = clustered_codes(20_000, seed=8), 8
        p = plan(len(h), r, hamming.bit_entropy_order(h))
    else:
        h, r = clustered_codes(1500, seed=3), 8
        p = Plan((), 0.0)
    assert np.array_equal(search(h, r, p, threads=2), brute(h, r))
    assert max(calls) >= 2  # jobs went on from where their buffer filled


@pytest.mark.parametrize("partition", [1, 7, 256, None])
def test_found_pairs_are_sorted_by_partitions_of_i_then_radix(monkeypatch, partition):
    """The found pairs are partitioned by the high bits of ``i`` and radix-sorted within each partition: tiny
    partitions (many of them, one crowded ``i`` spanning several radix digits), odd sizes and the shipped size give
    the rows sorted by ``i`` then ``j``, as brute force does."""
    if partition is not None:
        monkeypatch.setattr(hamming, "_SORT_PARTITION", partition)
    h, p = _crowded_codes()
    got = search(h, 4, p, threads=2)
    want = brute(h, 4)
    assert len(want) > 2 * hamming._SORT_PARTITION  # several partitions, also at the shipped size
    assert np.array_equal(got, want)
    assert np.array_equal(pairs_within(clustered_codes(5000, seed=1), 8), brute(clustered_codes(5000, seed=1), 8))


def test_the_cost_model_joins_a_dense_threshold_two_table_by_centre():
    """At 10M codes the chosen plan is 3 tables of 21 bits at threshold 2, joined centre by centre: 21 gathers per key
    against 115 partner visits per bucket (BENCHMARKS.md: 1.8x faster)."""
    p = plan(10_000_000, 8)
    assert [(len(b), t) for b, t in p.tables] == [(21, 2)] * 3
    w = 21
    assert hamming._ball_visits(w, 2) == 2**w * w
    present = 2**w * (1 - np.exp(-10_000_000 / 2**w))
    assert hamming._C_BALL * hamming._ball_visits(w, 2) < hamming._C_VISIT * hamming._bucket_visits(present, w, 2)
    assert hamming._ball_visits(w, 1) == float("inf")  # threshold 1 stays bucket by bucket


def test_inexact_plan_refused():
    with pytest.raises(ValueError, match="not exact"):
        search(uniform_codes(100), 8, Plan((((63, 62, 61), 2),), 0.0))


def test_plans_are_exact_by_construction():
    for n in (0, 1, 2, 50, 1000, 10**5, 10**6, 10**7, 10**8):
        for radius in range(0, 17):
            p = plan(n, radius)
            if p.brute_force:
                continue
            bits = [b for g, _ in p.tables for b in g]
            assert len(bits) == len(set(bits)) and all(0 <= b < 64 for b in bits)
            assert all(len(g) <= MAX_KEY_BITS for g, _ in p.tables)
            assert sum(t + 1 for _, t in p.tables) >= radius + 1


def test_large_inputs_use_tables_and_small_ones_may_use_brute_force():
    assert not plan(10**7, 8).brute_force and not plan(10**6, 8).brute_force
    assert plan(10**7, 8).cost < 0.05 * plan(10**7, 64).cost  # radius 64: every pair, brute force


def test_duplicates_all_equal_and_tiny_inputs():
    assert pairs_within(np.array([], dtype=np.uint64), 8).shape == (0, 3)
    assert pairs_within(np.array([5], dtype=np.uint64), 8).shape == (0, 3)
    same = np.full(40, 0xDEADBEEF, dtype=np.uint64)
    got = pairs_within(same, 0)
    assert len(got) == 40 * 39 // 2 and (got[:, 2] == 0).all()
    assert np.array_equal(got, brute(same, 0))
    rng = np.random.default_rng(4)
    base = rng.integers(0, 2**63, size=3000, dtype=np.uint64)
    dup = np.concatenate([base, base[:500], base[:100]])  # each of the first 100 codes three times
    for radius in (0, 4):
        assert np.array_equal(pairs_within(dup, radius), brute(dup, radius))
    assert np.array_equal(pairs_within(np.array([0, 2**64 - 1], dtype=np.uint64), 64), [[0, 1, 64]])
    assert pairs_within(np.array([0, 2**64 - 1], dtype=np.uint64), 63).shape == (0, 3)


def test_radius_zero_and_sixty_four_on_a_larger_set():
    h = uniform_codes(3000, seed=9, near_share=0.0)
    h = np.concatenate([h, h[:30], near_copies(np.random.default_rng(1), h[:200])])
    assert np.array_equal(pairs_within(h, 0), brute(h, 0))
    small = h[:300]
    assert len(pairs_within(small, 64)) == 300 * 299 // 2


def test_threads_and_bit_balancing_do_not_change_the_result():
    h = clustered_codes(30_000, seed=2)
    a = pairs_within(h, 8, threads=1, balance_bits=False)
    b = pairs_within(h, 8, threads=3, balance_bits=True)
    assert np.array_equal(a, b) and len(a) > 1000


def test_bad_arguments():
    with pytest.raises(ValueError, match="radius"):
        pairs_within(np.zeros(3, dtype=np.uint64), 65)
    with pytest.raises(ValueError, match="radius"):
        pairs_within(np.zeros(3, dtype=np.uint64), -1)
    with pytest.raises(ValueError, match="one-dimensional"):
        pairs_within(np.zeros((3, 2), dtype=np.uint64), 3)


def test_dedup_entry_point_is_the_same_search():
    h = uniform_codes(5000, seed=3, near_share=0.1)
    assert np.array_equal(near_pairs_mih(h, 8), pairs_within(h, 8))


def test_more_codes_than_the_packed_pair_format_holds_are_refused():
    from lookbench_pipeline.hamming import MAX_CODES

    big = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=np.uint64), shape=(MAX_CODES + 1,), strides=(0,))
    with pytest.raises(ValueError, match="at most"):
        search(big, 0, plan(10, 0))


def test_inputs_and_plans_outside_the_contract_are_refused():
    """Floats (a Python list of codes past 2^63 becomes float64 in numpy) and plans whose tables overlap, repeat a
    bit, name a bit outside 0..63 or have no bits are errors, not wrong rows."""
    with pytest.raises(ValueError, match="integer array"):
        pairs_within([2**64 - 1, 2**64 - 2, 0], 1)
    assert np.array_equal(pairs_within(np.array([2**64 - 1, 2**64 - 2, 0], dtype=np.uint64), 1), [[0, 1, 1]])
    h = uniform_codes(50)
    top = tuple(range(63, 47, -1))
    for tables in ([(top, 0), (top, 0)], [((63, 63, 62), 1)], [((64, 1), 1)], [((-1, 1), 1)], [((), 1), (top, 0)]):
        with pytest.raises(ValueError, match="0..63"):
            search(h, 1, Plan(tuple(tables), 0.0))
