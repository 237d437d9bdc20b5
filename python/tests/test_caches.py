"""Cache semantics from Python: ring layouts, trim/rewind, snapshots, LayerCaches."""

import numpy as np
import pytest

import ringkv
from conftest import positions, tokens


def decode(cache, first, count):
    history = None
    for p in range(first, first + count):
        history = cache.update(*tokens(p, 1))
    return history


def test_six_decodes_into_four_slots():
    # As tests/cache/rotating_kv_cache_test.cc, SixDecodesIntoFourSlots, by hand: slots
    # 0..3 take 0..3, then 4 and 5 overwrite slots 0 and 1.
    cache = ringkv.RotatingKVCache(4, block_tokens=2)
    history = decode(cache, 0, 6)
    assert positions(cache.state[0]) == [4, 5, 2, 3]
    assert positions(history.keys()) == [4, 5, 2, 3]
    assert (cache.ring_index, cache.offset, cache.max_size) == (2, 6, 4)
    assert positions(cache.view().keys()) == [3, 4, 5]  # the last max_size - 1, oldest first


def test_prefill_longer_than_the_window_then_decode():
    cache = ringkv.RotatingKVCache(4, block_tokens=2)
    history = cache.update(*tokens(0, 6))
    assert positions(history.keys()) == list(range(6))
    decode(cache, 6, 1)  # [2..5] trimmed to the window, slot 0 <- 6
    assert positions(cache.state[0]) == [6, 3, 4, 5]
    assert cache.ring_index == 1


def test_trim_rewind_and_can_rewind():
    cache = ringkv.KVCache(block_tokens=4)
    cache.update(*tokens(0, 10))
    assert cache.can_rewind(7) and not cache.can_rewind(11)
    assert cache.trim(3) == 3 and cache.offset == 7
    assert cache.rewind(5) and cache.offset == 5
    assert not cache.rewind(6) and cache.offset == 5
    assert cache.trim(100) == 5 and cache.offset == 0
    ring = ringkv.RotatingKVCache(4)
    decode(ring, 0, 6)  # the window moved: no live rewind
    assert not ring.can_rewind(5) and ring.trim(1) == 0 and ring.offset == 6


def test_snapshot_restore_merge_split():
    cache = ringkv.KVCache(block_tokens=4)
    cache.update(*tokens(0, 6))
    first = cache.snapshot()
    assert (first.from_offset, first.to_offset) == (0, 6) and first.size == 2 * 2 * 6 * 4 * 4
    cache.update(*tokens(6, 3))
    second = cache.snapshot(6)
    assert (second.from_offset, second.to_offset) == (6, 9)
    merged = cache.merge(first, second)
    assert first.consumed and second.consumed
    assert (merged.from_offset, merged.to_offset) == (0, 9)
    with pytest.raises(ringkv.Error, match="consumed"):
        first.size
    head, tail = cache.split(merged, 4)
    assert merged.consumed and (head.to_offset, tail.from_offset, tail.to_offset) == (4, 4, 9)
    other = ringkv.KVCache(block_tokens=4)
    assert other.restore(head, 4) and positions(other.state[0]) == [0, 1, 2, 3]
    assert other.restore(cache.merge(head, tail), 9)
    assert positions(other.state[0]) == list(range(9))
    assert cache.snapshot(9) is None


def test_failed_merge_keeps_both_snapshots():
    cache = ringkv.KVCache()
    cache.update(*tokens(0, 4))
    a = cache.snapshot(0)
    b = cache.snapshot(2)  # [2, 4) does not follow [0, 4)
    with pytest.raises(ringkv.Error):
        cache.merge(a, b)
    assert not a.consumed and not b.consumed and a.to_offset == 4


def test_fork_shares_nothing_visible_and_free_empties():
    cache = ringkv.KVCache()
    cache.update(*tokens(0, 3))
    fork = cache.fork()
    fork.update(*tokens(3, 2))
    assert cache.offset == 3 and fork.offset == 5
    assert positions(cache.state[0]) == [0, 1, 2]
    cache.free()
    assert cache.offset == 0 and cache.nbytes == 0 and fork.offset == 5


def test_layer_caches_interleaved_and_joint_operations():
    caches = ringkv.LayerCaches.interleaved(4, 2, 3, block_tokens=4, dtype="f16")
    assert len(caches) == 4
    kinds = [type(c) for c in caches]
    assert kinds == [ringkv.RotatingKVCache, ringkv.KVCache] * 2
    assert caches[1].storage_dtype == "f16" and caches[-2].max_size == 3
    for layer in caches:
        layer.update(*tokens(0, 2))
    assert caches.offset == 2 and caches.offsets == [2, 2, 2, 2]
    snap = caches.snapshot()
    assert len(snap) == 4
    for layer in caches:
        layer.update(*tokens(2, 1))
    assert caches.trim(1) == 1 and caches.offset == 2
    for layer in caches:
        layer.update(*tokens(2, 1))
    assert caches.restore(snap, 2) and caches.offsets == [2] * 4
    assert caches.restore(None, 1) and caches.offset == 1
    with pytest.raises(IndexError):
        caches[4]


def test_layer_caches_take_the_caches_over():
    a, b = ringkv.KVCache(), ringkv.RotatingKVCache(8)
    a.update(*tokens(0, 2))
    b.update(*tokens(0, 2))
    caches = ringkv.LayerCaches([a, b])
    assert caches.offsets == [2, 2] and positions(caches[0].state[0]) == [0, 1]
    for gone in (a, b):
        with pytest.raises(ringkv.Error, match="taken over"):
            gone.offset
    with pytest.raises(ringkv.Error, match="taken over"):
        ringkv.LayerCaches([a])
    c = ringkv.KVCache()
    with pytest.raises(ringkv.Error, match="twice"):
        ringkv.LayerCaches([c, c])
    assert c.offset == 0  # refused before anything moved
    with pytest.raises(ringkv.Error):
        ringkv.LayerCaches([c, "not a cache"])
    c.update(*tokens(0, 1))  # still usable
    assert c.offset == 1


def test_layer_objects_keep_the_layer_caches_alive():
    caches = ringkv.LayerCaches.interleaved(2, 1, 1)
    layer = caches[0]
    del caches
    layer.update(*tokens(0, 3))
    assert positions(layer.state[0]) == [0, 1, 2]
