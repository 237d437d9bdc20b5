"""Bad input raises ringkv.Error (with the C++ message) and changes nothing."""

import numpy as np
import pytest

import ringkv
from conftest import positions, tokens


def filled():
    cache = ringkv.KVCache(block_tokens=4)
    history = cache.update(*tokens(0, 3))
    return cache, history


def unchanged(cache, history):
    assert cache.offset == 3 and positions(cache.state[0]) == [0, 1, 2]
    assert len(history) == 3  # a failed call does not make views stale


@pytest.mark.parametrize("keys,values,match", [
    (tokens(3, 1)[0].astype(np.float64), tokens(3, 1)[1], "dtype float64"),
    (tokens(3, 1)[0].astype(np.int16), tokens(3, 1)[1], "dtype int16"),
    (tokens(3, 1, heads=3)[0], tokens(3, 1, heads=3)[1], "Update"),   # other heads
    (tokens(3, 1, dim=8)[0], tokens(3, 1)[1], "Update"),              # K and V disagree
    (tokens(3, 1)[0][0], tokens(3, 1)[1][0], "Update"),                # rank 3
    (np.zeros((1, 1, 1, 1, 1), np.float32), tokens(3, 1)[1], "rank 5"),
    ([[1.0]], tokens(3, 1)[1], "numpy array"),
    (tokens(3, 1)[0].astype(">f4"), tokens(3, 1)[1], "dtype >f4"),
])
def test_bad_update_changes_nothing(keys, values, match):
    cache, history = filled()
    with pytest.raises(ringkv.Error, match=match) as raised:
        cache.update(keys, values)
    assert str(raised.value).startswith("[")  # the [Class::Method] prefix
    unchanged(cache, history)


def test_shape_errors_are_a_subclass():
    cache, history = filled()
    with pytest.raises(ringkv.Error) as raised:
        cache.update(*tokens(3, 1, heads=3))
    assert isinstance(raised.value, RuntimeError)


def test_a_stale_history_raises_instead_of_reading():
    cache, history = filled()
    cache.update(*tokens(3, 1))
    for use in (len, lambda h: h.keys(), lambda h: h.values(),
                lambda h: ringkv.attention(tokens(0, 1)[0], h)):
        with pytest.raises(ringkv.Error, match="stale|changed"):
            use(history)
    ring = ringkv.RotatingKVCache(4)
    history = ring.update(*tokens(0, 1))
    ring.trim(1)
    with pytest.raises(ringkv.Error):
        history.keys()


def test_a_history_of_a_freed_or_restored_cache_is_stale():
    cache, history = filled()
    cache.free()
    with pytest.raises(ringkv.Error):
        len(history)
    cache, history = filled()
    assert cache.restore(None, 1)
    with pytest.raises(ringkv.Error):
        history.values()


def test_bad_arguments_of_the_other_calls_change_nothing():
    cache, history = filled()
    with pytest.raises(ringkv.Error):
        cache.snapshot(4)
    with pytest.raises(ringkv.Error):
        cache.trim(-1)
    with pytest.raises(ringkv.Error):
        cache.restore(None, -1)
    with pytest.raises(ringkv.Error, match="dtype 'int2' is not"):
        ringkv.KVCache(dtype="int2")
    with pytest.raises(ringkv.Error):
        ringkv.RotatingKVCache(0)
    with pytest.raises(ringkv.Error):
        ringkv.KVCache(block_tokens=0)
    ring = ringkv.RotatingKVCache(4)
    ring.update(*tokens(0, 2))
    with pytest.raises(ringkv.Error):
        cache.restore(ring.snapshot(), 2)  # a snapshot of another kind
    unchanged(cache, history)


@pytest.mark.parametrize("make,match", [
    (lambda: ringkv.KVCache(dtype="int16"), r"\[KVCache\] dtype 'int16' is not"),
    (lambda: ringkv.KVCache(dtype="INT8"), r"\[KVCache\] dtype 'INT8' is not"),
    (lambda: ringkv.KVCache(dtype=np.int8), r"dtype <class 'numpy.int8'> is not"),
    (lambda: ringkv.RotatingKVCache(4, key_dtype="q4"), r"\[RotatingKVCache\] key_dtype 'q4'"),
    (lambda: ringkv.KVCache(key_dtype="int8", value_dtype="fp8"), r"value_dtype 'fp8' is not"),
    (lambda: ringkv.LayerCaches.interleaved(2, 2, 4, value_dtype=3),
     r"\[LayerCaches.interleaved\] value_dtype 3 is not"),
    (lambda: ringkv.make_prompt_cache(2, dtype="int3"), r"dtype 'int3' is not"),
    # One side fixed and the other left to the first update: no such cache.
    (lambda: ringkv.KVCache(key_dtype="int8"), r"key_dtype 'int8' is given but value_dtype"),
    # The C++ constructor's rule: quantize both sides or neither.
    (lambda: ringkv.KVCache(key_dtype="int8", value_dtype="f16"),
     r"\[KVCache\] storage dtypes keys int8 / values f16"),
    (lambda: ringkv.RotatingKVCache(4, key_dtype="f16", value_dtype="bf16"),
     r"keys f16 / values bf16"),
])
def test_bad_storage_dtypes_are_refused_by_name(make, match):
    with pytest.raises(ringkv.Error, match=match):
        make()


@pytest.mark.parametrize("storage", [dict(dtype="int4"), dict(key_dtype="int8",
                                                               value_dtype="int4")])
def test_int4_needs_a_head_dim_that_is_a_multiple_of_32(storage):
    # tokens() rows have 4 values: the C++ check at the first update names the
    # side, and the cache stays empty.
    cache = ringkv.KVCache(block_tokens=4, **storage)
    side = "keys" if storage.get("key_dtype", "int4") == "int4" else "values"
    with pytest.raises(ringkv.ShapeError,
                       match=rf"\[KVCache::Update\] {side} dim 3 \(head dim\) is 4, but int4 "
                       "storage needs a multiple of 32"):
        cache.update(*tokens(0, 3))
    assert cache.offset == 0 and cache.nbytes == 0
    cache.update(*tokens(0, 3, dim=32))  # a good update after the failed one works
    assert cache.offset == 3
