"""Shared helpers: token arrays whose values encode their position, and a numpy
float64 attention reference that is independent of ringkv."""

import numpy as np
import pytest


def tokens(first, count, heads=2, dim=4, dtype=np.float32):
    """Keys and values [1, heads, count, dim]: key element (h, p, d) = p + 100 h + d / 8,
    value = -(that); exact in f32, f16 and bf16 for small p."""
    p = np.arange(first, first + count, dtype=np.float64)[None, None, :, None]
    h = np.arange(heads, dtype=np.float64)[None, :, None, None]
    d = np.arange(dim, dtype=np.float64)[None, None, None, :] / 8
    k = (p + 100 * h + d).astype(dtype)
    return k, (-k).copy()


def positions(keys):
    """The positions a [1, H, T, D] key array holds (head 0, element 0)."""
    return [int(x) for x in np.asarray(keys, dtype=np.float64)[0, 0, :, 0]]


def mask_array(query_len, key_len, causal=True, window=0):
    """Additive float64 mask [L, T]: query i at position T - L + i, key j at position j."""
    qp = np.arange(key_len - query_len, key_len)[:, None]
    kp = np.arange(key_len)[None, :]
    visible = np.ones((query_len, key_len), dtype=bool)
    if causal:
        visible &= kp <= qp
    if window:
        visible &= kp > qp - window
    return np.where(visible, 0.0, -np.inf)


def reference_attention(q, k, v, mask=None, scale=None):
    """softmax(scale q k^T + mask) v in float64, GQA by repeating each KV head over its
    Hq / Hkv consecutive query heads; a fully masked row gives 0."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if mask is not None:
        s = s + mask
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    return np.where(l > 0, (p @ v) / np.where(l > 0, l, 1.0), 0.0)


def bf16_bits(x):
    """float32 -> bf16 bits (uint16), round to nearest even (finite inputs)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


@pytest.fixture
def rng():
    return np.random.default_rng(12)
