"""numpy in, numpy out: dtypes, strides, read-only views and zero copies."""

import gc
import tracemalloc

import numpy as np
import pytest

import ringkv
from conftest import bf16_bits, bf16_to_f32, positions, tokens


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_update_then_state_equals_the_inputs(dtype):
    cache = ringkv.KVCache(block_tokens=8)
    k, v = tokens(0, 5, dtype=dtype)
    cache.update(k, v)
    keys, values = cache.state
    assert keys.dtype == dtype and keys.shape == (1, 2, 5, 4)
    np.testing.assert_array_equal(keys, k)
    np.testing.assert_array_equal(values, v)
    assert cache.storage_dtype is None  # not fixed at construction: the input decided


def test_bf16_is_a_uint16_view_both_ways():
    k, v = tokens(0, 3)
    kb, vb = bf16_bits(k + 0.01), bf16_bits(v)
    cache = ringkv.KVCache()
    cache.update(kb, vb)
    keys, values = cache.state
    assert keys.dtype == np.uint16
    np.testing.assert_array_equal(keys, kb)
    np.testing.assert_array_equal(values, vb)


def test_storage_dtype_converts_in_the_write():
    k, v = tokens(0, 3)
    k = k + np.float32(1 / 3)
    f16 = ringkv.KVCache(dtype="f16")
    f16.update(k, v)
    np.testing.assert_array_equal(f16.state[0], k.astype(np.float16))
    bf16 = ringkv.KVCache(dtype="bf16")
    bf16.update(k, v)
    np.testing.assert_array_equal(bf16.state[0], bf16_bits(k))
    np.testing.assert_array_equal(bf16_to_f32(bf16.state[0]), bf16_to_f32(bf16_bits(k)))
    assert ringkv.KVCache(dtype=np.float16).storage_dtype == "f16"
    assert ringkv.KVCache(dtype=np.uint16).storage_dtype == "bf16"


@pytest.mark.parametrize("name, stored", [
    ("f32", "f32"), ("float32", "f32"), ("f16", "f16"), ("float16", "f16"),
    ("bf16", "bf16"), ("bfloat16", "bf16"), ("int8", "int8"), ("int4", "int4"),
    ("int4h", "int4h")])
def test_every_dtype_name_is_accepted(name, stored):
    assert ringkv.KVCache(dtype=name).storage_dtype == stored
    assert ringkv.RotatingKVCache(4, key_dtype=name, value_dtype=name).storage_dtype == stored


@pytest.mark.parametrize("name", ["F16", "half", "int", "unknown", ""])
def test_an_unknown_dtype_name_is_refused_by_name(name):
    with pytest.raises(ringkv.Error, match=f"dtype '{name}' is not None"):
        ringkv.KVCache(dtype=name)


def test_strided_and_non_contiguous_inputs():
    k, v = tokens(0, 6, heads=3, dim=8)
    cases = [
        # An [L, H, D] model buffer seen as [1, H, L, D].
        (np.ascontiguousarray(k[0].transpose(1, 0, 2)).transpose(1, 0, 2)[None],
         np.ascontiguousarray(v[0].transpose(1, 0, 2)).transpose(1, 0, 2)[None]),
        # Every other element of the last axis, and a slice of the heads.
        (np.repeat(k, 2, axis=3)[..., ::2], np.repeat(v, 2, axis=3)[..., ::2]),
        # Negative strides: copied, then read.
        (k[:, ::-1, ::-1][:, ::-1, ::-1], v[..., ::-1][..., ::-1]),
        (k[:, :, ::-1].copy()[:, :, ::-1], v[:, :, ::-1].copy()[:, :, ::-1]),
    ]
    for kk, vv in cases:
        cache = ringkv.KVCache()
        cache.update(kk, vv)
        np.testing.assert_array_equal(cache.state[0], k)
        np.testing.assert_array_equal(cache.state[1], v)


def test_broadcast_and_read_only_inputs_are_read_in_place():
    row = np.arange(4, dtype=np.float32)
    k = np.broadcast_to(row, (1, 2, 3, 4))  # zero strides, read-only
    assert not k.flags.writeable
    cache = ringkv.KVCache()
    cache.update(k, k)
    np.testing.assert_array_equal(cache.state[0], np.broadcast_to(row, (1, 2, 3, 4)))


def test_misaligned_input_is_copied():
    k, v = tokens(0, 2)
    raw = np.zeros(k.nbytes + 1, dtype=np.uint8)
    shifted = raw[1:].view(np.float32).reshape(k.shape)  # elements at odd addresses
    shifted[...] = k
    assert shifted.ctypes.data % 4 != 0
    cache = ringkv.KVCache()
    cache.update(shifted, v)
    np.testing.assert_array_equal(cache.state[0], k)


def test_state_is_read_only_and_keeps_the_blocks_alive():
    cache = ringkv.KVCache()
    k, v = tokens(0, 4)
    cache.update(k, v)
    keys, values = cache.state
    assert not keys.flags.writeable and not values.flags.writeable
    with pytest.raises(ValueError):
        keys[0, 0, 0, 0] = 1
    # One block: the state is a view of it, as is the history.
    history = cache.view()
    assert np.shares_memory(keys, history.keys())
    del cache, history
    gc.collect()
    np.testing.assert_array_equal(keys, k)  # the base kept the block alive
    np.testing.assert_array_equal(values, v)


def test_state_over_several_blocks_is_a_copy_of_every_token():
    cache = ringkv.KVCache(block_tokens=2)
    for p in range(5):
        cache.update(*tokens(p, 1))
    assert positions(cache.state[0]) == [0, 1, 2, 3, 4]


def test_empty_cache_state_has_no_tokens():
    keys, values = ringkv.KVCache().state
    assert keys.shape[2] == 0 and values.shape[2] == 0


def test_attention_output_is_an_array_over_ringkv_memory():
    cache = ringkv.KVCache()
    k, v = tokens(0, 3)
    out = ringkv.attention(k, cache.update(k, v))
    assert out.dtype == np.float32 and out.flags.writeable
    assert out.base is not None and not out.flags.owndata


def test_borrowed_inputs_are_not_copied():
    """tracemalloc sees numpy's allocations: a borrowed input allocates no copy, while
    a negative-stride input (copied by design) shows the copy, so the measure works."""
    k = np.ones((1, 8, 4096, 64), dtype=np.float32)  # 8 MiB
    cache = ringkv.KVCache(block_tokens=4096)
    tracemalloc.start()
    try:
        cache.update(k, k)
        _, borrowed_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        cache.update(k[:, :, ::-1], k)
        _, copied_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert borrowed_peak < k.nbytes // 64
    assert copied_peak >= k.nbytes


def test_out_is_written_in_place(rng):
    k, v = tokens(0, 5)
    q = rng.standard_normal((1, 4, 5, 4)).astype(np.float32)
    buffer = np.full((5, 4, 4), 7.0, dtype=np.float32)  # [L, Hq, D], the model's layout
    out = buffer.transpose(1, 0, 2)[None]
    result = ringkv.scaled_dot_product_attention(q, k, v, out=out)
    assert result is out
    np.testing.assert_array_equal(buffer.transpose(1, 0, 2)[None],
                                  ringkv.scaled_dot_product_attention(q, k, v))


def test_bad_out_is_refused_and_left_alone(rng):
    k, v = tokens(0, 2)
    q = rng.standard_normal((1, 2, 2, 4)).astype(np.float32)
    for out in [np.zeros((1, 2, 2, 4), dtype=np.float64),   # dtype
                np.zeros((1, 2, 3, 4), dtype=np.float32),   # shape
                np.zeros((1, 2, 2, 4), dtype=np.float32)[..., ::-1]]:  # negative stride
        before = out.copy()
        with pytest.raises(ringkv.Error):
            ringkv.scaled_dot_product_attention(q, k, v, out=out)
        np.testing.assert_array_equal(out, before)
    read_only = np.zeros((1, 2, 2, 4), dtype=np.float32)
    read_only.setflags(write=False)
    with pytest.raises(ringkv.Error, match="read-only"):
        ringkv.scaled_dot_product_attention(q, k, v, out=read_only)
