"""Lossless homomorphic compression (dynamix.comm): exact decoding, sizing, dense fallback, bitmaps.

Workers are simulated in one process: their messages are summed as an all-reduce would sum them.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dynamix.comm import BUCKET, Codec, bitmap, counters, make_plan, reduce_in_process
from dynamix.comm.hashing import positions_and_signs
from dynamix.comm.peel import schedule


def aggregate(grads: list[torch.Tensor], seed: int = 11) -> tuple[torch.Tensor, Codec, object]:
    """The LHC reduction of ``grads`` as the ranks run it; a second rank's plan and decode must agree."""
    out, codec = reduce_in_process(grads, seed)
    other = Codec(seed)
    merged = other.index(grads[0])
    for g in grads[1:]:
        merged |= other.index(g)
    plan = other.plan(merged, grads[0].numel())
    total = sum(other.encode(g, plan) for g in grads)
    again = grads[-1].clone()  # another rank decodes into its own gradient
    other.decode(total, plan, again)
    assert torch.equal(out, again)  # every rank decodes the same bits
    return out, codec, plan


def sparse(n: int, density: float, gen: torch.Generator, values: str = "int",
           dtype=torch.float32) -> torch.Tensor:
    keep = torch.rand(n, generator=gen) < density
    if values == "int":  # integer values: every partial sum is exact in fp32, so decoding must be bit-exact
        v = torch.randint(-1000, 1001, (n,), generator=gen).to(dtype)
    else:
        v = torch.randn(n, generator=gen, dtype=dtype)
    return v * keep


@pytest.mark.parametrize("workers", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("density", [0.0005, 0.005, 0.03])
def test_decoded_sum_is_bit_exact_for_exactly_representable_sums(workers, density):
    gen = torch.Generator().manual_seed(workers * 1000 + int(density * 1e4))
    n = BUCKET + 1000  # a short last bucket
    grads = [sparse(n, density, gen) for _ in range(workers)]
    out, codec, plan = aggregate(grads)
    assert torch.equal(out, torch.stack(grads).sum(0))
    merged = torch.stack(grads).ne(0).any(0)
    too_large = [int(counters(int(merged[lo:lo + BUCKET].sum()))) >= min(BUCKET, n - lo) for lo in (0, BUCKET)]
    assert plan.n_counters > 0 and plan.fallbacks == sum(too_large)  # dense only where the sketch is not smaller
    assert codec.stats.bytes_sent < codec.stats.dense_bytes  # it compressed


@pytest.mark.parametrize("workers", [2, 8, 32])
def test_float64_gradients_decode_exactly(workers):
    gen = torch.Generator().manual_seed(workers)
    n = BUCKET + 7
    # dyadic values with 20 significant bits: sums of up to 2^32 of them are exact in float64
    grads = [torch.round(sparse(n, 0.01, gen, "randn", torch.float64) * 2**10) / 2**10 for _ in range(workers)]
    out, _, _ = aggregate(grads)
    assert torch.equal(out, torch.stack(grads).sum(0))


@pytest.mark.parametrize("workers", [4, 16])
def test_fp32_values_are_within_a_few_ulp_of_the_bucket_maximum(workers):
    """Float sums: a peeled value carries the rounding of the counters it was read from."""
    gen = torch.Generator().manual_seed(5 + workers)
    n = 2 * BUCKET
    grads = [sparse(n, 0.01, gen, "randn") for _ in range(workers)]
    out, _, _ = aggregate(grads)
    ref = torch.stack([g.double() for g in grads]).sum(0)
    assert torch.equal(out != 0, ref != 0)  # the support is exact
    ulp = ref.abs().max() * 2.0**-23
    err = (out.double() - ref).abs().max()
    assert err <= 64 * ulp, f"max error {float(err / ulp):.1f} ulp of the largest value"


def test_dense_fallback_when_the_sketch_would_not_be_smaller_and_result_is_still_exact():
    gen = torch.Generator().manual_seed(3)
    n = 4 * BUCKET
    grads = [sparse(n, 0.002, gen) for _ in range(4)]
    for g in grads:  # bucket 1 dense in every worker, bucket 2 at 82 % merged density
        g[BUCKET : 2 * BUCKET] = torch.randint(1, 50, (BUCKET,), generator=gen).float()
        g[2 * BUCKET : 3 * BUCKET] *= 0
        g[2 * BUCKET : 3 * BUCKET] += (torch.rand(BUCKET, generator=gen) < 0.35).float()
    merged = torch.stack(grads).ne(0).any(0)
    m2 = int(merged[2 * BUCKET : 3 * BUCKET].sum())
    assert counters(m2) >= BUCKET  # the rule would need a sketch at least as large as the bucket
    out, _, plan = aggregate(grads)
    assert torch.equal(out, torch.stack(grads).sum(0))
    assert plan.dense == [(BUCKET, 2 * BUCKET), (2 * BUCKET, 3 * BUCKET)] and plan.fallbacks == 2


def test_a_bucket_that_cannot_peel_goes_dense_and_stays_exact(monkeypatch):
    """Force every sketch size to fail the structural peel: no estimate, the bucket is sent dense
    (the tensor plan, whose peel can be replaced; the C plan gives the same plans, a test)."""
    import dynamix.comm.lhc as lhc

    monkeypatch.setattr(lhc.native, "library", lambda: None)
    real = lhc.schedule

    def unpeelable(pos, n_counters):
        s = real(pos, n_counters)
        return dataclasses.replace(s, unpeeled=torch.ones_like(s.unpeeled))

    monkeypatch.setattr(lhc, "schedule", unpeelable)
    gen = torch.Generator().manual_seed(9)
    grads = [sparse(2 * BUCKET, 0.01, gen) for _ in range(4)]
    out, _, plan = aggregate(grads)
    assert torch.equal(out, torch.stack(grads).sum(0))
    assert plan.n_counters == 0 and plan.fallbacks == 2


def test_sizing_peels_without_fallback_across_bucket_loads():
    """The rule 1.3 m + 24 with up to three sizes: no fallback in 150 buckets of 5 to 5,000 items."""
    gen = torch.Generator().manual_seed(0)
    loads = torch.randint(5, 5_000, (150,), generator=gen)
    nz = torch.cat([b * BUCKET + torch.randperm(BUCKET, generator=gen)[:m].sort().values
                    for b, m in enumerate(loads.tolist())])
    plan = make_plan(nz, 150 * BUCKET, seed=0)
    assert plan.fallbacks == 0 and not plan.sched.unpeeled.any()
    assert plan.sched.order.numel() == plan.items.numel() == loads.sum()  # every item peels
    assert plan.n_counters / loads.sum() < 1.4


def test_peeling_threshold_is_where_the_literature_puts_it():
    """3-hash peeling of 20,000 items: fails at 1.15 counters per item, succeeds at 1.30."""
    gen = torch.Generator().manual_seed(1)
    m = 20_000
    local = torch.randperm(BUCKET, generator=gen)[:m]
    for ratio, ok in ((1.15, False), (1.30, True)):
        q = int(ratio * m / 3)
        pos, _ = positions_and_signs(local, torch.zeros(m, dtype=torch.long), torch.full((m,), q), 4, BUCKET)
        assert bool(schedule(pos, 3 * q).unpeeled.any()) != ok


def test_empty_and_all_zero_gradients():
    out, _, plan = aggregate([torch.zeros(1000), torch.zeros(1000)])
    assert torch.equal(out, torch.zeros(1000)) and plan.message_len == 0


def test_hashes_depend_on_the_seed_only():
    local = torch.arange(100)
    a = positions_and_signs(local, torch.zeros(100, dtype=torch.long), torch.full((100,), 50), 1, BUCKET)
    b = positions_and_signs(local, torch.zeros(100, dtype=torch.long), torch.full((100,), 50), 1, BUCKET)
    c = positions_and_signs(local, torch.zeros(100, dtype=torch.long), torch.full((100,), 50), 2, BUCKET)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    pos = a[0]
    assert ((pos >= torch.tensor([0, 50, 100])) & (pos < torch.tensor([50, 100, 150]))).all()


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1001])
def test_bitmap_round_trip(n):
    mask = torch.rand(n, generator=torch.Generator().manual_seed(n)) < 0.4
    bits = bitmap.pack(mask)
    assert bits.numel() == bitmap.packed_len(n)
    assert torch.equal(bitmap.nonzero(bits, n), mask.nonzero().squeeze(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 65, 1001, 4096])
def test_index_of_a_gradient_is_the_bitmap_of_its_non_zeros(n, dtype):
    x = torch.randn(n, dtype=dtype, generator=torch.Generator().manual_seed(n))
    x[torch.rand(n, generator=torch.Generator().manual_seed(n + 1)) < 0.6] = 0.0
    if n > 3:
        x[:3] = torch.tensor([-0.0, float("nan"), float("inf")], dtype=dtype)  # -0 is zero, NaN and inf are not
    out = torch.full((bitmap.packed_len(n),), 255, dtype=torch.uint8)
    assert torch.equal(bitmap.pack_nonzero(x, out=out), bitmap.pack(x != 0)) and torch.equal(out, bitmap.pack(x != 0))


def test_error_feedback_top_k_keeps_k_entries_and_carries_the_rest():
    from dynamix.comm.topk import ErrorFeedbackTopK

    gen = torch.Generator().manual_seed(2)
    topk = ErrorFeedbackTopK(0.01)
    sent, total = torch.zeros(10_000, dtype=torch.float64), torch.zeros(10_000, dtype=torch.float64)
    for _ in range(5):
        g = torch.randn(10_000, generator=gen)
        total += g
        topk(g)
        assert int((g != 0).sum()) == 100
        sent += g
    # nothing is lost, only delayed: what was sent plus the residual is what came in
    assert torch.allclose(sent + topk.residual, total, atol=1e-5)
    assert float((sent - total).abs().max()) > 0.5  # but this step is lossy
    with pytest.raises(ValueError, match="top-k fraction = 0"):
        ErrorFeedbackTopK(0.0)


# ------------------------------------------------------------------------------------ the C loops


def _hypergraph(seed: int, m: int, per_item: float):
    from dynamix.comm.hashing import positions_and_signs

    q = max(int(per_item * m / 3), 1)
    local = torch.randperm(BUCKET, generator=torch.Generator().manual_seed(seed))[:m]
    pos, sign = positions_and_signs(local, torch.zeros(m, dtype=torch.long), torch.full((m,), q), seed, BUCKET)
    return pos, sign, 3 * q


@pytest.mark.parametrize("m, per_item", [(0, 1.3), (1, 1.3), (50, 1.3), (5000, 1.3), (20000, 1.25), (3000, 1.1)])
def test_the_c_replay_gives_the_tensor_versions_results_bit_for_bit(m, per_item):
    """Along the same schedule (the C plan's schedules are the tensor ones: a test below), complete or,
    at 1.1 counters per item, leaving a core unpeeled."""
    from dynamix.comm import native, peel

    if native.library() is None:
        pytest.skip("no C compiler here: the tensor versions run")
    pos, sign, n_counters = _hypergraph(m, m, per_item)
    sched = peel.schedule(pos, n_counters)
    assert bool(sched.unpeeled.any()) == (per_item < 1.2)  # 1.1 counters per item leaves a core unpeeled
    for dtype in (torch.float32, torch.float64):
        values = torch.randn(m, dtype=dtype, generator=torch.Generator().manual_seed(m))
        sketch = torch.zeros(n_counters, dtype=dtype).index_add_(0, pos.reshape(-1),
                                                                 (sign.to(dtype) * values[:, None]).reshape(-1))
        a, b = sketch.clone(), sketch.clone()
        va, vb = peel.replay(sched, pos, sign, a), peel.replay_vectorised(sched, pos, sign, b)
        assert torch.equal(va, vb) and torch.equal(a, b)  # the values and the residual, bit for bit


@pytest.mark.parametrize("n, density", [(0, 0.0), (1, 1.0), (9, 0.5), (64, 1.0), (128, 0.5), (200, 1.0),
                                        (100_003, 0.01), (100_003, 0.9)])
def test_the_c_bitmap_positions_are_the_tensor_versions(n, density):
    from dynamix.comm import native

    if native.library() is None:
        pytest.skip("no C compiler here: the tensor version runs")
    bits = bitmap.pack(torch.rand(n, generator=torch.Generator().manual_seed(n)) < density)
    assert torch.equal(bitmap.nonzero(bits, n), bitmap.nonzero_vectorised(bits, n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_c_encoder_is_the_tensor_version_and_weights_only_what_it_sends(dtype, monkeypatch):
    from dynamix.comm import native

    if native.library() is None:
        pytest.skip("no C compiler here: the tensor version runs")
    gen = torch.Generator().manual_seed(3)
    grads = [sparse(BUCKET + 500, 0.02, gen, "randn", dtype) for _ in range(3)]
    codec = Codec(seed=4)
    merged = codec.index(grads[0]) | codec.index(grads[1]) | codec.index(grads[2])
    plan = make_plan(bitmap.nonzero(merged.view(torch.uint8)[: bitmap.packed_len(grads[0].numel())],
                                    grads[0].numel()), grads[0].numel(), 4)
    fast = codec.encode(grads[1], plan, weight=0.3)
    monkeypatch.setattr(native, "library", lambda: None)
    slow = codec.encode(grads[1], plan, weight=0.3)
    assert torch.equal(fast, slow)  # bit for bit: the same products, added in the same order
    total = sum(codec.encode(g, plan, weight=0.3) for g in grads)
    out = torch.zeros_like(grads[0])
    sq = codec.decode(total, plan, out)
    want = (torch.stack(grads) * torch.tensor(0.3, dtype=dtype)).sum(0)
    assert torch.allclose(out, want, rtol=0, atol=1e-5) and sq == pytest.approx(float(want.dot(want)), rel=1e-5)


@pytest.mark.parametrize("density, n", [(0.0, 5000), (0.0005, 3 * BUCKET + 77), (0.002, 40 * BUCKET),
                                        (0.01, 2 * BUCKET), (0.2, BUCKET + 9), (0.9, BUCKET)])
def test_the_c_plan_is_the_tensor_plan(density, n, monkeypatch):
    """Buckets that re-hash (some of the 40 at 0.2 %), go dense (0.9: the sketch would not be
    smaller) and empty ones: the C pass plans exactly what the tensor version plans, hash positions,
    signs and peel schedule included."""
    from dynamix.comm import native

    if native.library() is None:
        pytest.skip("no C compiler here: the tensor version runs")
    gen = torch.Generator().manual_seed(int(density * 1e4) + n)
    nz = (torch.rand(n, generator=gen) < density).nonzero().squeeze(1)
    fast = make_plan(nz, n, 13)
    monkeypatch.setattr(native, "library", lambda: None)
    ref = make_plan(nz, n, 13)
    for field in ("items", "pos", "sign"):
        assert torch.equal(getattr(fast, field), getattr(ref, field)), field
    for field in ("order", "order_k", "unpeeled"):
        assert torch.equal(getattr(fast.sched, field), getattr(ref.sched, field)), field
    assert fast.sched.round_len == ref.sched.round_len
    assert (fast.n_counters, fast.dense, fast.fallbacks) == (ref.n_counters, ref.dense, ref.fallbacks)
    if density == 0.9:
        assert fast.fallbacks == 1 and fast.n_counters == 0
    if density == 0.002:  # some bucket took a second, larger sketch
        m_b = torch.bincount(nz // BUCKET, minlength=40)
        assert fast.n_counters > int(counters(m_b).sum())


def test_a_re_hashed_bucket_decodes_exactly():
    """About 130 merged items a bucket: some first sketches do not peel and take a larger one; the
    result is still exact."""
    gen = torch.Generator().manual_seed(21)
    grads = [sparse(40 * BUCKET, 0.0005, gen) for _ in range(4)]
    out, codec, plan = aggregate(grads)
    assert torch.equal(out, torch.stack(grads).sum(0))
    merged = torch.stack(grads).ne(0).any(0)
    m_b = merged.view(40, BUCKET).sum(1)
    assert plan.n_counters > int(counters(m_b).sum()), "no bucket needed a second sketch size"


def test_without_a_compiler_the_tensor_versions_run_and_say_so_once(tmp_path, monkeypatch, caplog):
    from dynamix.comm import native

    monkeypatch.setenv("DYNAMIX_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    native.library.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="dynamix.comm.native"):
            assert native.library() is None and native.library() is None
        assert len(caplog.records) == 1 and "tensor versions" in caplog.records[0].getMessage()
        grads = [torch.randn(5000, generator=torch.Generator().manual_seed(r)) * (torch.rand(5000) < 0.05)
                 for r in range(4)]
        out, _ = reduce_in_process(grads, seed=3)
        assert torch.allclose(out, torch.stack(grads).sum(0), atol=1e-5)
        monkeypatch.setenv("DYNAMIX_NATIVE", "0")
        monkeypatch.delenv("CC")
        native.library.cache_clear()
        assert native.library() is None and not list(tmp_path.glob("*.so"))
    finally:
        native.library.cache_clear()
