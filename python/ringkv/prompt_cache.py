"""mlx-lm's prompt-cache helpers (mlx_lm.models.cache), on ringkv's caches.

    caches = ringkv.make_prompt_cache(len(model.layers))      # one KVCache per layer
    ... forward passes update caches[i] ...
    ringkv.save_prompt_cache("chat.safetensors", caches, {"model": "my-model"}, tokens=prompt)
    caches, metadata = ringkv.load_prompt_cache("chat.safetensors", return_metadata=True)

The file (ringkv::SaveCaches, docs/cache_file.md) restores every layer exactly:
decoding on from the loaded caches gives the same results, bit for bit, as
decoding on from the saved ones. It is not mlx-lm's file format.
"""

import os

from . import _ringkv
from ._ringkv import Error, KVCache, LayerCaches, RotatingKVCache

__all__ = [
    "make_prompt_cache",
    "save_prompt_cache",
    "load_prompt_cache",
    "trim_prompt_cache",
    "can_trim_prompt_cache",
]


def _layer_count(layers):
    """An int, or (as mlx-lm takes the model) anything with a `layers` sequence."""
    if hasattr(layers, "layers"):
        return len(layers.layers)
    if isinstance(layers, bool) or not isinstance(layers, int):
        raise TypeError(f"[make_prompt_cache] layers is {type(layers).__name__}, "
                        "not an int or a model with a .layers sequence")
    return layers


def make_prompt_cache(layers, global_every=1, window=None, dtype=None, *, max_kv_size=None,
                      block_tokens=256, key_dtype=None, value_dtype=None):
    """One cache per layer, as a LayerCaches.

    layers: the layer count, or a model with a `layers` sequence (mlx-lm passes the model).
    max_kv_size: mlx-lm's option: every layer a RotatingKVCache(max_kv_size).
    global_every, window: Gemma-style interleaving (LayerCaches.interleaved): layer i
        is a KVCache when (i + 1) % global_every == 0, else a RotatingKVCache(window).
    Neither: every layer a KVCache. dtype: the storage dtype (None: the first
    update's), as in KVCache; key_dtype / value_dtype: keys and values in their own
    dtypes (e.g. key_dtype="int8", value_dtype="int4"), as in KVCache.
    """
    storage = dict(dtype=dtype, key_dtype=key_dtype, value_dtype=value_dtype)
    n = _layer_count(layers)
    if max_kv_size is not None:
        if window is not None or global_every != 1:
            raise Error(f"[make_prompt_cache] max_kv_size {max_kv_size} makes every layer "
                        f"sliding; it cannot be combined with window {window} and "
                        f"global_every {global_every}")
        if n < 1:
            raise Error(f"[make_prompt_cache] layers {n} is not positive")
        return LayerCaches([RotatingKVCache(max_kv_size, block_tokens=block_tokens, **storage)
                            for _ in range(n)])
    if window is None:
        if global_every != 1:
            raise Error(f"[make_prompt_cache] global_every {global_every} needs a window "
                        "for the layers in between")
        if n < 1:
            raise Error(f"[make_prompt_cache] layers {n} is not positive")
        return LayerCaches([KVCache(block_tokens=block_tokens, **storage) for _ in range(n)])
    if global_every == 1:
        raise Error(f"[make_prompt_cache] window {window} is unused with global_every 1 "
                    "(every layer global); pass max_kv_size for all-sliding layers")
    return LayerCaches.interleaved(n, global_every, window, block_tokens=block_tokens, **storage)


def _as_layer_caches(caches, function):
    """A LayerCaches as is; a sequence of caches as copy-on-write forks of them (O(blocks))."""
    if isinstance(caches, LayerCaches):
        return caches
    try:
        layers = list(caches)
    except TypeError:
        raise TypeError(f"[{function}] caches is {type(caches).__name__}, not a LayerCaches "
                        "or a sequence of KVCache / RotatingKVCache") from None
    for i, layer in enumerate(layers):
        if not isinstance(layer, (KVCache, RotatingKVCache)):
            raise TypeError(f"[{function}] caches[{i}] is {type(layer).__name__}, "
                            "not a KVCache or RotatingKVCache")
    return LayerCaches([layer.fork() for layer in layers])


def _utf8(text):
    return text.encode("utf-8", "surrogatepass")


def save_prompt_cache(path, caches, metadata=None, tokens=None):
    """Writes every layer of `caches` (at one offset), `tokens` and `metadata`
    (str -> str) to `path` atomically (ringkv::SaveCaches). `caches` is a
    LayerCaches or a sequence of caches; none of them changes. mlx-lm's
    save_prompt_cache(file_name, cache, metadata)."""
    metadata = {} if metadata is None else metadata
    if not hasattr(metadata, "items"):
        raise TypeError(f"[save_prompt_cache] metadata is {type(metadata).__name__}, not a dict")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"[save_prompt_cache] metadata entry {key!r}: {value!r} is not "
                            "str -> str")
    # As UTF-8 bytes, lone surrogates included, so that the library's own check
    # refuses text that is not valid UTF-8, by name.
    encoded = {_utf8(key): _utf8(value) for key, value in metadata.items()}
    _ringkv._save_caches(os.fspath(path), _as_layer_caches(caches, "save_prompt_cache"),
                         [] if tokens is None else tokens, encoded)


def load_prompt_cache(path, return_metadata=False, return_tokens=False):
    """Reads a file save_prompt_cache wrote, after validating all of it (a problem
    raises ringkv.SnapshotError naming it). Returns the LayerCaches, or a tuple
    (caches, metadata) with return_metadata (as mlx-lm), and the tokens (a list of
    int) last with return_tokens."""
    caches, tokens, metadata = _ringkv._load_caches(os.fspath(path))
    result = (caches,)
    if return_metadata:
        result += (metadata,)
    if return_tokens:
        result += (tokens,)
    return result[0] if len(result) == 1 else result


def _layers(caches):
    return list(caches) if not isinstance(caches, LayerCaches) else None


def can_trim_prompt_cache(caches, num_tokens=1):
    """Whether trim_prompt_cache(caches, num_tokens) would remove min(num_tokens,
    offset) tokens from every layer (a sliding layer that has wrapped cannot)."""
    if num_tokens < 0:
        raise Error(f"[can_trim_prompt_cache] num_tokens {num_tokens} is negative")
    layers = _layers(caches)
    if layers is None:
        target = caches.offset - min(num_tokens, caches.offset)
        return caches.can_rewind(target)
    offsets = {layer.offset for layer in layers}
    if len(offsets) > 1:
        return False
    offset = offsets.pop() if offsets else 0
    target = offset - min(num_tokens, offset)
    return all(layer.can_rewind(target) for layer in layers)


def trim_prompt_cache(caches, num_tokens):
    """Removes the last min(num_tokens, offset) tokens from every layer and returns
    that count, or returns 0 with nothing changed when some layer cannot (as
    mlx-lm's trim_prompt_cache, but all layers or none)."""
    if num_tokens < 0:
        raise Error(f"[trim_prompt_cache] num_tokens {num_tokens} is negative")
    layers = _layers(caches)
    if layers is None:
        return caches.trim(num_tokens)
    if not layers or not can_trim_prompt_cache(layers, num_tokens):
        return 0
    return [layer.trim(num_tokens) for layer in layers][0]
