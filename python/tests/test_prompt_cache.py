"""ringkv.PromptCache and the mlx-lm-style helpers (make/save/load/trim_prompt_cache).

The "model" here writes, for the token at position p, K/V that are a fixed
function of (token, p): enough to tell whether the caches hold the right prefix
(a real model's K/V also depend on the earlier tokens, which changes nothing for
the caches). Attention outputs over what the caches hold are compared with a
fresh cache fed the same tokens (they come out identical: the same K/V, read
in the same order).
"""

import os
import pathlib

import numpy as np
import pytest

import ringkv

HKV, HQ, DIM, WINDOW = 2, 4, 16, 4


def kv_for(tokens, start):
    """K/V [1, Hkv, L, D] float32 for `tokens` at positions start, start + 1, ..."""
    keys = np.empty((1, HKV, len(tokens), DIM), np.float32)
    values = np.empty_like(keys)
    for i, token in enumerate(tokens):
        rng = np.random.default_rng([int(token) & 0xFFFFFFFF, start + i])
        keys[0, :, i, :] = rng.standard_normal((HKV, DIM))
        values[0, :, i, :] = rng.standard_normal((HKV, DIM))
    return keys, values


def query(seed):
    return np.random.default_rng(seed).standard_normal((1, HQ, 1, DIM)).astype(np.float32)


def masks(caches):
    return ["causal" if isinstance(caches[i], ringkv.KVCache) else ("sliding_window", WINDOW)
            for i in range(len(caches))]


def feed(caches, tokens):
    """One forward of `tokens` after what the caches hold: every layer's update."""
    start = caches.offset
    keys, values = kv_for(tokens, start)
    return [caches[i].update(keys, values) for i in range(len(caches))]


def attend(caches, tokens, seed):
    """Feeds one token and returns every layer's attention output for a query."""
    histories = feed(caches, tokens)
    return [ringkv.attention(query(seed), h, mask=m) for h, m in zip(histories, masks(caches))]


def mixed_caches():
    """Layer 0 a RotatingKVCache(WINDOW), layer 1 a KVCache, f32 storage."""
    return ringkv.make_prompt_cache(2, global_every=2, window=WINDOW, dtype="f32")


def fresh_outputs(tokens, next_token, seed):
    caches = mixed_caches()
    feed(caches, tokens)
    return attend(caches, [next_token], seed)


def serve(prompt_cache, tokens):
    """Lookup, prefill (chunks recorded), commit. Returns (reused, chunks)."""
    chunks = []

    def forward(chunk):
        chunks.append([int(t) for t in chunk])
        feed(prompt_cache.caches, chunk)

    match = prompt_cache.lookup(tokens)
    prompt_cache.prefill(tokens, match, forward)
    prompt_cache.commit(tokens)
    return match.reused, chunks


def snapshot_of(prompt_cache):
    """What a failed call must leave alone: the trie and the live caches."""
    caches = prompt_cache.caches
    states = []
    for i in range(len(caches)):
        keys, values = caches[i].state
        states.append((caches[i].offset, keys.copy(), values.copy()))
    stats = prompt_cache.stats
    nodes = [(n.start, n.end, list(n.tokens), n.pinned, n.active) for n in prompt_cache.nodes()]
    return (stats.bytes, stats.nodes, stats.lookups, nodes), states


def assert_same(before, after):
    assert before[0] == after[0]
    for (o1, k1, v1), (o2, k2, v2) in zip(before[1], after[1]):
        assert o1 == o2
        np.testing.assert_array_equal(k1, k2)
        np.testing.assert_array_equal(v1, v2)


@pytest.fixture
def tmp(tmp_path):
    return tmp_path  # pytest makes it unique per test


A = list(range(100, 111))  # 11 tokens, longer than the window


def test_lookup_commit_reuses_the_committed_prefix():
    pc = ringkv.PromptCache(mixed_caches(), byte_budget=1 << 20, fingerprint="test")
    reused, chunks = serve(pc, A)
    assert reused == 0 and sum(chunks, []) == A
    b = A + [7, 8, 9]
    reused, chunks = serve(pc, b)
    # The commit of A captured the ring's window at 11, so all of A is reusable.
    assert reused == len(A)
    assert sum(chunks, []) == b[len(A):]
    assert pc.stats.hits == 1 and pc.stats.tokens_reused == len(A)
    assert pc.stats.bytes <= pc.byte_budget and pc.stats.bytes == pc.snapshot_bytes()

    # A request branching inside A at 6: the wrapped ring has no window there, so
    # nothing is reused, but prefill stops at 6 to capture one.
    c = A[:6] + [55, 56]
    match = pc.lookup(c)
    assert (match.reused, match.checkpoints) == (0, [6])
    pc.prefill(c, match, lambda chunk: feed(pc.caches, chunk))
    pc.commit(c)
    # The next request through that branch point reuses it; the caches hold
    # exactly its prefix: attention equals a fresh cache's.
    d = A[:6] + [77, 78, 79]
    match = pc.lookup(d)
    assert match.reused == 6 and pc.caches.offset == 6
    feed(pc.caches, d[6:-1])
    got = attend(pc.caches, d[-1:], seed=1)
    want = fresh_outputs(d[:-1], d[-1], seed=1)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)  # measured: identical


def test_prefill_stops_at_checkpoints_and_passes_chunks_in_order():
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    serve(pc, A)
    b = A[:5] + [1, 2, 3, 4, 5, 6]
    match = pc.lookup(b)
    assert all(match.reused < c < len(b) for c in match.checkpoints)
    chunks = []
    pc.prefill(b, match, lambda chunk: (chunks.append(list(chunk)), feed(pc.caches, chunk)))
    assert sum(chunks, []) == b[match.reused:]
    ends = np.cumsum([len(c) for c in chunks]) + match.reused
    assert set(match.checkpoints) <= set(ends.tolist())


def test_an_exception_in_the_forward_propagates_out_of_prefill():
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    match = pc.lookup(A)

    def forward(chunk):
        raise ValueError("model failed")

    with pytest.raises(ValueError, match="model failed"):
        pc.prefill(A, match, forward)


def test_the_prompt_cache_keeps_its_caches_alive():
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="test")  # no other reference
    serve(pc, A)
    assert pc.caches.offset == len(A)


def test_commit_refuses_tokens_outside_int_with_nothing_changed():
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    serve(pc, A)
    feed(pc.caches, [1])
    before = snapshot_of(pc)
    with pytest.raises(ringkv.Error, match=r"tokens\[11\] 4294967296"):
        pc.commit(A + [2**32])
    with pytest.raises(ringkv.Error, match="float64"):
        pc.commit(np.asarray(A + [1], dtype=np.float64))
    assert_same(before, snapshot_of(pc))
    pc.commit(np.asarray(A + [1], dtype=np.int64))  # integer arrays are fine
    assert pc.stats.nodes >= 1


def test_lookup_of_no_tokens_is_a_ringkv_error():
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    with pytest.raises(ringkv.Error, match=r"\[PromptCache::Lookup\]"):
        pc.lookup([])


def test_save_and_load_a_prompt_cache(tmp):
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="model v1")
    serve(pc, A)
    path = tmp / "trie.safetensors"
    pc.save(path)  # a pathlib.Path is fine
    other = ringkv.PromptCache(mixed_caches(), fingerprint="model v1")
    other.load(str(path))
    assert [(n.start, n.end, list(n.tokens)) for n in other.nodes()] == \
        [(n.start, n.end, list(n.tokens)) for n in pc.nodes()]
    b = A + [3]
    match = other.lookup(b)
    assert match.reused == len(A)
    got = attend(other.caches, b[-1:], seed=2)
    for g, w in zip(got, fresh_outputs(A, b[-1], seed=2)):
        np.testing.assert_array_equal(g, w)  # measured: identical


def test_a_file_of_another_model_is_refused_with_nothing_changed(tmp):
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="model v1")
    serve(pc, A)
    path = tmp / "trie.safetensors"
    pc.save(path)
    other = ringkv.PromptCache(mixed_caches(), fingerprint="model v2")
    serve(other, [5, 6, 7])
    before = snapshot_of(other)
    with pytest.raises(ringkv.SnapshotError, match="fingerprint"):
        other.load(path)
    assert_same(before, snapshot_of(other))


def test_a_corrupted_prompt_cache_file_is_refused_with_nothing_changed(tmp):
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    serve(pc, A)
    path = tmp / "trie.safetensors"
    pc.save(path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # inside the last tensor's bytes
    path.write_bytes(bytes(data))

    other = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    serve(other, [5, 6, 7])
    before = snapshot_of(other)
    with pytest.raises(ringkv.SnapshotError, match=r"\[PromptCache::Load\].*checksum"):
        other.load(path)
    assert_same(before, snapshot_of(other))


def decode_on(caches, steps, seed):
    """Outputs of `steps` one-token forwards from where the caches are."""
    return [attend(caches, [900 + s], seed + s) for s in range(steps)]


def wrapped_caches():
    """Mixed caches after a 7-token prefill and 6 decoded tokens (the ring has wrapped)."""
    caches = mixed_caches()
    feed(caches, list(range(7)))
    for t in range(6):
        feed(caches, [50 + t])
    return caches


def test_save_load_round_trip_decodes_on_identically(tmp):
    caches = wrapped_caches()
    tokens = list(range(7)) + [50 + t for t in range(6)]
    metadata = {"model": "tiny", "note": "ünïcode ok", "empty": ""}
    path = tmp / "chat.safetensors"
    ringkv.save_prompt_cache(path, caches, metadata, tokens=tokens)

    loaded, got_metadata, got_tokens = ringkv.load_prompt_cache(
        path, return_metadata=True, return_tokens=True)
    assert got_metadata == metadata
    assert list(got_tokens) == tokens
    assert isinstance(loaded, ringkv.LayerCaches)
    assert loaded.offsets == caches.offsets
    assert [type(loaded[i]) for i in range(2)] == [ringkv.RotatingKVCache, ringkv.KVCache]
    assert loaded[0].max_size == WINDOW

    for want, got in zip(decode_on(caches, 5, seed=10), decode_on(loaded, 5, seed=10)):
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)  # bit for bit, as SaveCaches promises


def test_load_prompt_cache_returns_like_mlx_lm(tmp):
    path = tmp / "c.safetensors"
    ringkv.save_prompt_cache(path, wrapped_caches())
    assert isinstance(ringkv.load_prompt_cache(path), ringkv.LayerCaches)
    caches, metadata = ringkv.load_prompt_cache(path, return_metadata=True)
    assert metadata == {} and caches.offset == 13
    caches, tokens = ringkv.load_prompt_cache(path, return_tokens=True)
    assert list(tokens) == []


def test_save_prompt_cache_takes_a_list_of_caches_and_changes_none(tmp):
    layers = [ringkv.KVCache(dtype="f32"), ringkv.RotatingKVCache(WINDOW, dtype="f32")]
    keys, values = kv_for([1, 2, 3, 4, 5, 6], 0)
    for layer in layers:
        layer.update(keys, values)
    before = [layer.state[0].copy() for layer in layers]
    path = tmp / "list.safetensors"
    ringkv.save_prompt_cache(path, layers, {"k": "v"})
    for layer, state in zip(layers, before):
        assert layer.offset == 6
        np.testing.assert_array_equal(layer.state[0], state)
        layer.update(*kv_for([7], 6))  # still usable: save took forks, not the caches
    loaded = ringkv.load_prompt_cache(path)
    np.testing.assert_array_equal(loaded[0].state[0], before[0])


def test_save_prompt_cache_refuses_bad_metadata_and_writes_nothing(tmp):
    path = tmp / "bad.safetensors"
    with pytest.raises(TypeError, match="metadata"):
        ringkv.save_prompt_cache(path, wrapped_caches(), {"n": 3})
    with pytest.raises(ringkv.Error, match="UTF-8"):
        ringkv.save_prompt_cache(path, wrapped_caches(), {"k": "\udc80"})
    assert os.listdir(tmp) == []


def corrupt(path, how):
    data = bytearray(pathlib.Path(path).read_bytes())
    if how == "flip":
        data[-5] ^= 0x01
    elif how == "truncate":
        del data[len(data) // 2:]
    pathlib.Path(path).write_bytes(bytes(data))


@pytest.mark.parametrize("how, problem", [("flip", "checksum"), ("truncate", "")])
def test_a_corrupted_caches_file_raises_snapshot_error_naming_it(tmp, how, problem):
    path = tmp / "c.safetensors"
    ringkv.save_prompt_cache(path, wrapped_caches(), {"a": "b"}, tokens=[1, 2])
    corrupt(path, how)
    with pytest.raises(ringkv.SnapshotError, match=r"\[LoadCaches\].*" + problem) as raised:
        ringkv.load_prompt_cache(path)
    assert isinstance(raised.value, ringkv.Error) and isinstance(raised.value, RuntimeError)


def test_a_missing_file_is_a_snapshot_error(tmp):
    with pytest.raises(ringkv.SnapshotError, match="missing.safetensors"):
        ringkv.load_prompt_cache(tmp / "missing.safetensors")


def test_make_prompt_cache_layouts():
    class Model:
        layers = [object()] * 3

    assert [type(c) for c in ringkv.make_prompt_cache(Model())] == [ringkv.KVCache] * 3
    sliding = ringkv.make_prompt_cache(2, max_kv_size=16)
    assert [sliding[i].max_size for i in range(2)] == [16, 16]
    mixed = ringkv.make_prompt_cache(4, global_every=2, window=8, dtype="f16")
    assert [type(mixed[i]) for i in range(4)] == [ringkv.RotatingKVCache, ringkv.KVCache] * 2
    assert mixed[1].storage_dtype == "f16"
    with pytest.raises(ringkv.Error, match="window 8"):
        ringkv.make_prompt_cache(2, window=8)
    with pytest.raises(ringkv.Error, match="max_kv_size 16"):
        ringkv.make_prompt_cache(2, global_every=2, window=8, max_kv_size=16)
    with pytest.raises(TypeError, match="layers"):
        ringkv.make_prompt_cache("2")


def test_trim_prompt_cache_all_layers_or_none():
    caches = ringkv.make_prompt_cache(2, global_every=2, window=WINDOW, dtype="f32")
    feed(caches, [1, 2, 3])
    assert ringkv.can_trim_prompt_cache(caches)
    assert ringkv.trim_prompt_cache(caches, 2) == 2 and caches.offset == 1

    wrapped = wrapped_caches()  # the ring moved past its window: it cannot rewind
    before = [wrapped[i].state[0].copy() for i in range(2)]
    assert not ringkv.can_trim_prompt_cache(wrapped)
    assert ringkv.trim_prompt_cache(wrapped, 1) == 0
    assert wrapped.offsets == [13, 13]
    for i in range(2):
        np.testing.assert_array_equal(wrapped[i].state[0], before[i])

    layers = [ringkv.KVCache(), ringkv.KVCache()]
    for layer in layers:
        layer.update(*kv_for([1, 2, 3, 4], 0))
    assert ringkv.can_trim_prompt_cache(layers, 3)
    assert ringkv.trim_prompt_cache(layers, 10) == 4
    assert [layer.offset for layer in layers] == [0, 0]
    with pytest.raises(ringkv.Error, match="num_tokens -1"):
        ringkv.trim_prompt_cache(layers, -1)


def test_a_call_from_inside_prefill_is_refused_not_raced():
    pc = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    match = pc.lookup(A)
    refused = []

    def forward(chunk):
        with pytest.raises(ringkv.Error, match=r"\[PromptCache.commit\] another call"):
            pc.commit(A)
        refused.append(True)
        feed(pc.caches, chunk)

    pc.prefill(A, match, forward)
    assert refused
    pc.commit(A)  # usable again once prefill returned
    assert pc.stats.nodes == 1


def test_pin_save_entry_and_load_from_memory(tmp):
    pc = ringkv.PromptCache(mixed_caches(), byte_budget=1 << 20, fingerprint="test")
    serve(pc, A)
    serve(pc, [1, 2, 3, 4, 5])
    pc.pin(A)
    assert [n.pinned for n in pc.nodes() if list(n.tokens) == A] == [True]
    with pytest.raises(ringkv.Error, match="Pin"):
        pc.pin([9, 9, 9])
    pc.unpin(A)

    path = tmp / "entry.safetensors"
    pc.save(os.fsencode(path), tokens=A)  # only A's path; a bytes path is fine
    other = ringkv.PromptCache(mixed_caches(), fingerprint="test")
    other.load_from_memory(path.read_bytes())
    assert [list(n.tokens) for n in other.nodes()] == [A]
    other.clear()
    assert other.stats.nodes == 0 and other.nodes() == []


def test_constructor_arguments_are_checked():
    with pytest.raises(TypeError, match=r"\[PromptCache\] caches is a list"):
        ringkv.PromptCache([ringkv.KVCache()])
    with pytest.raises(ringkv.Error, match="fingerprint"):
        ringkv.PromptCache(mixed_caches(), fingerprint="\udc80")  # not valid UTF-8
    pc = ringkv.PromptCache(mixed_caches(), byte_budget=4096, fingerprint="ü")
    assert (pc.byte_budget, pc.fingerprint) == (4096, "ü")
