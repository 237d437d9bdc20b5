#!/usr/bin/env python3
"""A numpy decode loop on ringkv's caches, checked against a no-cache recompute.

A 2-layer transformer with random weights (embedding, RMSNorm, RoPE, grouped-query
attention, SwiGLU MLP, logits), written in numpy. Layer 0 keeps its whole history
in a ringkv.KVCache; layer 1 is a sliding-window layer on a
ringkv.RotatingKVCache(window). The loop prefills a prompt (in two chunks, so the
ring's prefill path runs on a non-empty cache), then decodes greedily one token
at a time, attention running in ringkv.attention over what each cache's update
returned.

Every logit the cached loop produces, prefill and decode, is compared with a
float64 numpy forward over the whole sequence so far, with no cache: full causal
attention on layer 0, the sliding-window mask on layer 1. The script prints the
largest absolute difference and exits 1 when it is above the tolerance
(docs/python.md has the measurement behind the defaults).

    PYTHONPATH=build/dev/python python3 examples/python/decode_loop.py
"""

import argparse
import sys

import numpy as np

import ringkv

# Largest |cached - reference| logit allowed, per cache storage dtype. The logits
# have std ~1 (max ~4). Measured over seeds 0..199 at the default sizes: at most
# 2.2e-6 with f32 storage (float32 arithmetic) and 1.2e-3 with f16 storage (its
# K/V rounding, relative 2^-11, dominates); the limits are about 4x those. A
# sliding window off by one token moves logits by more than 0.5.
TOLERANCE = {"f32": 1e-5, "f16": 5e-3}


class Model:
    """Random weights, float64 master copies and the float32 ones the loop uses."""

    def __init__(self, rng, vocab, dim, q_heads, kv_heads, head_dim, hidden, layers):
        self.vocab, self.dim = vocab, dim
        self.q_heads, self.kv_heads, self.head_dim = q_heads, kv_heads, head_dim

        def weight(rows, cols):
            return rng.standard_normal((rows, cols)) / np.sqrt(rows)

        self.embedding = rng.standard_normal((vocab, dim))
        self.layers = []
        for _ in range(layers):
            self.layers.append(
                {
                    "attn_norm": 1.0 + 0.1 * rng.standard_normal(dim),
                    "wq": weight(dim, q_heads * head_dim),
                    "wk": weight(dim, kv_heads * head_dim),
                    "wv": weight(dim, kv_heads * head_dim),
                    "wo": weight(q_heads * head_dim, dim),
                    "mlp_norm": 1.0 + 0.1 * rng.standard_normal(dim),
                    "w_gate": weight(dim, hidden),
                    "w_up": weight(dim, hidden),
                    "w_down": weight(hidden, dim),
                }
            )
        self.final_norm = 1.0 + 0.1 * rng.standard_normal(dim)
        self.unembedding = weight(dim, vocab)

    def cast(self, dtype):
        """The same weights in `dtype` (a shallow copy of the model)."""
        out = Model.__new__(Model)
        out.__dict__.update(self.__dict__)
        out.embedding = self.embedding.astype(dtype)
        out.layers = [{k: w.astype(dtype) for k, w in layer.items()} for layer in self.layers]
        out.final_norm = self.final_norm.astype(dtype)
        out.unembedding = self.unembedding.astype(dtype)
        return out


def rms_norm(x, weight, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x, positions, base=10000.0):
    """Rotary embedding (rotate-half form) of x [H, L, D] at absolute positions [L]."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / x.shape[-1])
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def project_heads(x, weight, heads, head_dim):
    """x [L, dim] @ weight -> [heads, L, head_dim] (a transposed view, not a copy)."""
    return (x @ weight).reshape(x.shape[0], heads, head_dim).transpose(1, 0, 2)


def mlp(x, layer):
    h = rms_norm(x, layer["mlp_norm"])
    return (silu(h @ layer["w_gate"]) * (h @ layer["w_up"])) @ layer["w_down"]


def cached_forward(model, tokens, caches, masks):
    """float32 logits [L, vocab] of `tokens`, the chunk after what `caches` hold."""
    m = model
    positions = np.arange(caches[0].offset, caches[0].offset + len(tokens))
    x = m.embedding[tokens]
    for layer, cache, mask in zip(m.layers, caches, masks):
        h = rms_norm(x, layer["attn_norm"])
        q = rope(project_heads(h, layer["wq"], m.q_heads, m.head_dim), positions)
        k = rope(project_heads(h, layer["wk"], m.kv_heads, m.head_dim), positions)
        # v stays a strided view of the projection: ringkv reads it in place.
        v = project_heads(h, layer["wv"], m.kv_heads, m.head_dim)
        history = cache.update(k[None], v[None])
        out = ringkv.attention(q[None], history, mask=mask)  # [1, Hq, L, D] float32
        x = x + out[0].transpose(1, 0, 2).reshape(len(tokens), -1) @ layer["wo"]
        x = x + mlp(x, layer)
    return rms_norm(x, m.final_norm) @ m.unembedding


def reference_forward(model, tokens, windows):
    """float64 logits [T, vocab] of the whole sequence, recomputed without a cache.

    windows[i] is layer i's sliding window (None: full causal attention)."""
    m = model
    n = len(tokens)
    positions = np.arange(n)
    x = m.embedding[tokens]
    group = m.q_heads // m.kv_heads
    for layer, window in zip(m.layers, windows):
        h = rms_norm(x, layer["attn_norm"])
        q = rope(project_heads(h, layer["wq"], m.q_heads, m.head_dim), positions)
        k = rope(project_heads(h, layer["wk"], m.kv_heads, m.head_dim), positions)
        v = project_heads(h, layer["wv"], m.kv_heads, m.head_dim)
        k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # GQA
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(m.head_dim)  # [Hq, T, T]
        key_pos, query_pos = positions[None, :], positions[:, None]
        visible = key_pos <= query_pos
        if window is not None:
            visible &= key_pos > query_pos - window
        scores = np.where(visible, scores, -np.inf)
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out = (p / p.sum(axis=-1, keepdims=True)) @ v  # [Hq, T, D]
        x = x + out.transpose(1, 0, 2).reshape(n, -1) @ layer["wo"]
        x = x + mlp(x, layer)
    return rms_norm(x, m.final_norm) @ m.unembedding


def run(args):
    rng = np.random.default_rng(args.seed)
    model64 = Model(rng, args.vocab, args.dim, args.q_heads, args.kv_heads, args.head_dim,
                    args.hidden, layers=2)
    model32 = model64.cast(np.float32)
    prompt = rng.integers(0, args.vocab, args.prompt_len)

    caches = [ringkv.KVCache(dtype=args.dtype),
              ringkv.RotatingKVCache(args.window, dtype=args.dtype)]
    masks = ["causal", ("sliding_window", args.window)]
    windows = [None, args.window]

    tokens = []
    worst = 0.0

    def step(chunk):
        nonlocal worst
        logits = cached_forward(model32, np.asarray(chunk), caches, masks)
        tokens.extend(int(t) for t in chunk)
        expected = reference_forward(model64, np.asarray(tokens), windows)[-len(chunk):]
        worst = max(worst, float(np.max(np.abs(logits - expected))))
        return int(np.argmax(logits[-1]))

    split = args.prompt_len // 2
    step(prompt[:split])
    next_token = step(prompt[split:])
    for _ in range(args.new_tokens):
        next_token = step([next_token])

    assert caches[0].offset == caches[1].offset == len(tokens)
    return worst, len(tokens)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-len", type=int, default=13)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--window", type=int, default=8, help="layer 1's sliding window")
    parser.add_argument("--vocab", type=int, default=97)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--q-heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="f32",
                        help="the caches' storage dtype")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="max |cached - reference| logit (default: per dtype)")
    args = parser.parse_args(argv)
    if args.prompt_len < 2:
        parser.error("--prompt-len must be at least 2 (it is prefilled in two chunks)")
    tolerance = TOLERANCE[args.dtype] if args.tolerance is None else args.tolerance

    worst, n = run(args)
    print(f"{n} tokens ({args.prompt_len} prompt + {args.new_tokens} decoded), "
          f"{args.dtype} caches, window {args.window}: "
          f"max |cached - recompute| logit = {worst:.3g} (tolerance {tolerance:.3g})")
    if not worst <= tolerance:  # also catches NaN
        print("FAIL: cached logits differ from the no-cache recompute", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
