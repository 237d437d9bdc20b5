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
    with pytest.raises(ringkv.Error, match="dtype"):
        ringkv.KVCache(dtype="int8")
    with pytest.raises(ringkv.Error):
        ringkv.RotatingKVCache(0)
    with pytest.raises(ringkv.Error):
        ringkv.KVCache(block_tokens=0)
    ring = ringkv.RotatingKVCache(4)
    ring.update(*tokens(0, 2))
    with pytest.raises(ringkv.Error):
        cache.restore(ring.snapshot(), 2)  # a snapshot of another kind
    unchanged(cache, history)
