"""Attention against a numpy float64 reference, on every kernel tier this machine runs."""

import numpy as np
import pytest

import ringkv
from conftest import bf16_bits, bf16_to_f32, mask_array, reference_attention

# The f32 kernels' max abs error against the f64 reference on inputs like these
# (standard normal, D = 8) measured 3.1e-7 (scalar) to 4.0e-7 (avx512) over 20 draws.
ATOL = 2e-6
# bf16 K/V on a tier with Context.rounds_bf16_weights, whose softmax weights are rounded to bf16
# against each block's running max (no float64 reference does that): measured up to 1.7e-3 here.
ATOL_BF16_WEIGHTS = 4.5e-3
TIERS = ringkv.available_isas()


def random_qkv(rng, hq=4, hkv=2, length=5, keys=9, dim=8, dv=8):
    q = rng.standard_normal((1, hq, length, dim)).astype(np.float32)
    k = rng.standard_normal((1, hkv, keys, dim)).astype(np.float32)
    v = rng.standard_normal((1, hkv, keys, dv)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize(
    "mask,reference",
    [
        (None, lambda l, t: None),
        ("causal", lambda l, t: mask_array(l, t)),
        (("window", 3), lambda l, t: mask_array(l, t, causal=False, window=3)),
        (("sliding_window", 3), lambda l, t: mask_array(l, t, window=3)),
    ],
)
def test_sdpa_structural_masks_with_gqa(rng, tier, mask, reference):
    q, k, v = random_qkv(rng)
    ctx = ringkv.Context(isa=tier)
    assert ctx.tier == tier
    got = ringkv.scaled_dot_product_attention(q, k, v, mask=mask, ctx=ctx)
    np.testing.assert_allclose(got, reference_attention(q, k, v, reference(5, 9)), atol=ATOL)


def test_additive_and_boolean_masks(rng):
    q, k, v = random_qkv(rng)
    bias = rng.standard_normal((1, 4, 5, 9)).astype(np.float32)
    np.testing.assert_allclose(ringkv.scaled_dot_product_attention(q, k, v, mask=bias),
                               reference_attention(q, k, v, bias), atol=ATOL)
    visible = rng.random((5, 9)) < 0.6  # broadcast from [L, K]
    visible[:, 0] = True
    got = ringkv.scaled_dot_product_attention(q, k, v, mask=visible, scale=0.5)
    np.testing.assert_allclose(
        got, reference_attention(q, k, v, np.where(visible, 0.0, -np.inf), 0.5), atol=ATOL)


def test_attention_over_a_cache_history_with_out(rng):
    q, k, v = random_qkv(rng, length=3, keys=3)
    cache = ringkv.KVCache()
    cache.update(k[:, :, :2], v[:, :, :2])
    history = cache.update(k[:, :, 2:], v[:, :, 2:])
    out = np.zeros((1, 4, 3, 8), dtype=np.float32)
    assert ringkv.attention(q, history, out=out) is out
    np.testing.assert_allclose(out, reference_attention(q, k, v, mask_array(3, 3)), atol=ATOL)


def test_rotating_cache_equals_the_sliding_window_over_the_whole_sequence(rng):
    # docs/embedding.md: a RotatingKVCache(w) layer under a causal mask gives what
    # sliding-window attention over the whole sequence gives, prefill then decode.
    window, total = 4, 11
    q, k, v = random_qkv(rng, length=total, keys=total)
    cache = ringkv.RotatingKVCache(window, block_tokens=3)
    history = cache.update(k[:, :, :5], v[:, :, :5])
    got = ringkv.attention(q[:, :, :5], history)
    want = reference_attention(q[:, :, :5], k[:, :, :5], v[:, :, :5], mask_array(5, 5, window=window))
    np.testing.assert_allclose(got, want, atol=ATOL)
    for t in range(5, total):
        history = cache.update(k[:, :, t:t + 1], v[:, :, t:t + 1])
        got = ringkv.attention(q[:, :, t:t + 1], history)
        want = reference_attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1],
                                   mask_array(1, t + 1, window=window))
        np.testing.assert_allclose(got, want, atol=ATOL)


def test_f16_and_bf16_inputs(rng):
    q, k, v = random_qkv(rng)
    h = [a.astype(np.float16) for a in (q, k, v)]
    np.testing.assert_allclose(ringkv.scaled_dot_product_attention(*h),
                               reference_attention(*h, mask_array(5, 9)), atol=ATOL)
    b = [bf16_bits(a) for a in (q, k, v)]  # bf16 as uint16 bits
    np.testing.assert_allclose(ringkv.scaled_dot_product_attention(*b),
                               reference_attention(*(bf16_to_f32(x) for x in b), mask_array(5, 9)),
                               atol=ATOL_BF16_WEIGHTS if ringkv.Context().rounds_bf16_weights else ATOL)


@pytest.mark.parametrize("tier", TIERS)
def test_bf16_keys_with_f32_queries(rng, tier):
    # A tier with Context.rounds_bf16_queries attends with bf16(q); the others with q. One with
    # Context.rounds_bf16_weights (the same tiers) also rounds the softmax weights.
    q, k, v = random_qkv(rng, length=1, keys=64, dim=32, dv=32)
    kb, vb = bf16_bits(k), bf16_bits(v)
    ctx = ringkv.Context(isa=tier)
    got = ringkv.scaled_dot_product_attention(q, kb, vb, ctx=ctx)
    kf, vf = bf16_to_f32(kb), bf16_to_f32(vb)
    as_given = reference_attention(q, kf, vf)
    rounded = reference_attention(bf16_to_f32(bf16_bits(q)), kf, vf)
    want = rounded if ctx.rounds_bf16_queries else as_given
    np.testing.assert_allclose(got, want, atol=ATOL_BF16_WEIGHTS if ctx.rounds_bf16_weights else ATOL)
    # The two references differ by more than the kernel's error, so the test tells them apart
    # where the weights stay f32 (C++'s Bf16ProductsTest holds the rounding tier to both).
    assert ctx.rounds_bf16_weights == ctx.rounds_bf16_queries
    assert np.abs(as_given - rounded).max() > 10 * ATOL


def test_bad_inputs_raise(rng):
    q, k, v = random_qkv(rng)
    with pytest.raises(ringkv.Error, match="dtype float64"):
        ringkv.scaled_dot_product_attention(q.astype(np.float64), k, v)
    with pytest.raises(ringkv.Error):
        ringkv.scaled_dot_product_attention(q[:, :3], k, v)  # Hq not a multiple of Hkv
    with pytest.raises(ringkv.Error, match="mask"):
        ringkv.scaled_dot_product_attention(q, k, v, mask="diagonal")
    with pytest.raises(ringkv.Error, match="isa"):
        ringkv.Context(isa="neon")
    with pytest.raises(ringkv.Error, match="ctx"):
        ringkv.scaled_dot_product_attention(q, k, v, ctx="fast")
