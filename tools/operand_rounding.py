#!/usr/bin/python3
"""What rounding the attention operands to 8 bits would cost, before it is built.

The integer decode rounds each query row and each row's softmax weights (per block
of 256 keys) to int16. vpmaddubsw would do twice the multiply-adds of vpmaddwd
(docs/attention_tuning.md, "Integer decode of int4"), but takes 8-bit operands. This
float64 simulation measures the attention output error against f32 K/V, as
ringkv_kv_accuracy does (|error| / RMS of the exact output, Hq 16 / Hkv 4, D 128,
T 4096, one query row per head), for int8 and int4 K/V with the operands exact and
rounded to 8 bits. Cases: N(0, 1) K/V; 4 K channels x10; 4 q channels x10.

  /usr/bin/python3 tools/operand_rounding.py      # numpy only (python3-numpy)
"""

import numpy as np

D, T, G, KV_HEADS, BLOCK = 128, 4096, 4, 4, 256


def int8_rows(x):
    """Symmetric int8, one scale per row, dequantised."""
    scale = np.abs(x).max(-1, keepdims=True) / 127
    return np.rint(x / scale) * scale


def int4_groups(x):
    """Symmetric int4, one scale per group of 32 values, dequantised."""
    groups = x.reshape(*x.shape[:-1], -1, 32)
    scale = np.abs(groups).max(-1, keepdims=True) / 7
    return (np.clip(np.rint(groups / scale), -7, 7) * scale).reshape(x.shape)


def round_rows(x, levels):
    """Each row rounded to `levels` steps of its largest magnitude."""
    top = np.abs(x).max(-1, keepdims=True)
    return np.rint(x / top * levels) * top / levels


def attend(q, k, v, levels=None):
    """Softmax attention; with `levels`, q and each block's weights rounded."""
    if levels:
        q = round_rows(q, levels)
    s = q @ k.T / np.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    if not levels:
        return (p @ v) / p.sum(-1, keepdims=True)
    out = sum(round_rows(p[:, b:b + BLOCK], levels) @ v[b:b + BLOCK] for b in range(0, T, BLOCK))
    return out / p.sum(-1, keepdims=True)


def main():
    rng = np.random.default_rng(1)
    print(f"attention error against f32 K/V, |error| / RMS: Hq {G * KV_HEADS}, Hkv {KV_HEADS}, "
          f"D {D}, T {T}, one query row per head")
    print(f"{'case':10s} {'K/V':5s} {'operands':14s} {'max':>10s} {'mean':>10s}")
    for case in ("random", "outlier K", "outlier q"):
        errors = {}
        for _ in range(KV_HEADS):
            k, v, q = (rng.standard_normal((n, D)) for n in (T, T, G))
            if case == "outlier K":
                k[:, :4] *= 10
            if case == "outlier q":
                q[:, :4] *= 10
            exact = attend(q, k, v)
            rms = np.sqrt((exact ** 2).mean())
            for name, store in (("int8", int8_rows), ("int4", int4_groups)):
                ks, vs = store(k), store(v)
                for operands, levels in (("int16 (now)", 32767), ("8-bit", 127)):
                    err = np.abs(attend(q, ks, vs, levels) - exact) / rms
                    errors.setdefault((name, operands), []).append((err.max(), err.mean()))
        for (name, operands), e in errors.items():
            e = np.array(e)
            print(f"{case:10s} {name:5s} {operands:14s} {e[:, 0].max():10.3e} {e[:, 1].mean():10.3e}")


if __name__ == "__main__":
    main()
