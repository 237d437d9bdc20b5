"""Speculation as a context manager: commit on a normal exit, roll back on an exception."""

import pytest

import ringkv
from conftest import positions, tokens


def model_caches():
    caches = ringkv.LayerCaches.interleaved(3, 3, 4, block_tokens=2)  # ring, ring, full
    for layer in caches:
        layer.update(*tokens(0, 3))
    return caches


def draft(spec, first, count):
    for layer in spec.caches:
        layer.update(*tokens(first, count))


def test_an_exception_rolls_every_layer_back():
    caches = model_caches()
    before = [positions(layer.state[0]) for layer in caches]
    with pytest.raises(KeyError):
        with caches.speculate() as spec:
            draft(spec, 3, 2)
            raise KeyError("draft rejected")
    assert caches.offsets == [3, 3, 3]
    assert [positions(layer.state[0]) for layer in caches] == before
    assert not spec.active
    with pytest.raises(ringkv.Error, match="ended"):
        spec[0].update(*tokens(5, 1))


def test_a_normal_exit_commits_every_draft():
    caches = model_caches()
    with caches.speculate() as spec:
        draft(spec, 3, 2)
    assert caches.offsets == [5, 5, 5]
    assert positions(caches[2].state[0]) == [0, 1, 2, 3, 4]
    assert positions(caches[0].view().keys()) == [2, 3, 4]


def test_commit_keeps_the_accepted_prefix():
    caches = model_caches()
    with ringkv.speculate(caches) as spec:
        draft(spec, 3, 3)
        spec.commit(1)
        with pytest.raises(ringkv.Error):
            spec.commit(1)
    assert caches.offsets == [4, 4, 4]
    assert positions(caches[2].state[0]) == [0, 1, 2, 3]


def test_a_forward_that_stopped_part_way_rolls_back_on_exit():
    caches = model_caches()
    with pytest.raises(ringkv.Error):
        with caches.speculate() as spec:
            spec[0].update(*tokens(3, 1))  # the other layers never drafted
    assert caches.offsets == [3, 3, 3]


def test_speculation_over_a_list_of_caches():
    a, b = ringkv.KVCache(), ringkv.RotatingKVCache(8)
    for c in (a, b):
        c.update(*tokens(0, 2))
    with ringkv.speculate([a, None, b]) as spec:
        assert spec[1] is None and len(spec) == 3
        spec[0].update(*tokens(2, 1))
        spec[2].update(*tokens(2, 1))
    assert (a.offset, b.offset) == (3, 3)
    with pytest.raises(ringkv.Error):
        ringkv.speculate([a, b, 5])
