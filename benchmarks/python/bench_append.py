#!/usr/bin/env python3
"""Appending one token to a cache that holds T tokens, from Python.

The comparison mlx-lm users run, in numpy, next to ringkv (Hkv 8, D 128, f16):
  concat   np.concatenate of the whole cache with each token (O(T) per token)
  step256  mlx-lm's KVCache growth: a 256-token zero block concatenated onto the
           whole buffer when it is full, in-place writes in between, and the
           view [..., :offset, :] returned (amortised over whole 256-token cycles)
  ringkv   ringkv.KVCache.update (paged: a new block every 256 tokens, no copy)
Each row starts from a cache of T tokens and times appends one token at a time
(the Python loop included, as in a decode loop); time per appended token, median
of --repeat runs. The same rows in C++: benchmarks/cache/bench_append.cc; with
--cpp-bench <build>/benchmarks/cache/ringkv_cache_bench its KVCache rows are run
first and printed beside ringkv's (the difference is the cost of a Python call).

    PYTHONPATH=build/dev/python python3 benchmarks/python/bench_append.py
"""

import argparse
import statistics
import sys
import time

import numpy as np

import cpp_bench
import ringkv

HEADS, DIM, STEP = 8, 128, 256


def token():
    return np.zeros((1, HEADS, 1, DIM), np.float16)


def filled(t):
    return np.zeros((1, HEADS, t, DIM), np.float16)


def time_concat(t, appends):
    """Seconds per token: each append copies the whole cache."""
    keys, values = filled(t), filled(t)
    k, v = token(), token()
    start = time.perf_counter()
    for _ in range(appends):
        keys = np.concatenate([keys, k], axis=2)
        values = np.concatenate([values, v], axis=2)
    return (time.perf_counter() - start) / appends


def time_step256(t):
    """Seconds per token over one whole growth cycle (256 appends from T, a multiple of 256)."""
    keys, values = filled(t), filled(t)
    offset = t
    k, v = token(), token()
    start = time.perf_counter()
    for _ in range(STEP):
        if offset == keys.shape[2]:
            keys = np.concatenate([keys, filled(STEP)], axis=2)
            values = np.concatenate([values, filled(STEP)], axis=2)
        keys[..., offset:offset + 1, :] = k
        values[..., offset:offset + 1, :] = v
        offset += 1
        history = keys[..., :offset, :], values[..., :offset, :]
    del history
    return (time.perf_counter() - start) / STEP


def time_ringkv(cache, t):
    """Seconds per token over 256 appends from T (one block opened), then rewound to T."""
    k, v = token(), token()
    start = time.perf_counter()
    for _ in range(STEP):
        cache.update(k, v)
    seconds = (time.perf_counter() - start) / STEP
    if not cache.rewind(t):
        raise RuntimeError(f"rewind to {t} failed at offset {cache.offset}")
    return seconds


def run(lengths, repeat, concat_appends):
    rows = []
    for t in lengths:
        cache = ringkv.KVCache(dtype="f16")
        cache.update(filled(t), filled(t))
        samples = {"concat": [], "step256": [], "ringkv": []}
        for _ in range(repeat):  # interleaved, so machine noise hits all three alike
            samples["concat"].append(time_concat(t, concat_appends))
            samples["step256"].append(time_step256(t))
            samples["ringkv"].append(time_ringkv(cache, t))
        rows.append((t, {name: statistics.median(s) for name, s in samples.items()}))
    return rows


def print_table(rows, cpp):
    extra_head = " | C++ KVCache µs/token | Python call µs |" if cpp else " |"
    print("| T | concat µs/token | step256 µs/token | ringkv µs/token "
          "| concat / ringkv | step256 / ringkv" + extra_head)
    print("|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if cpp else ""))
    for t, m in rows:
        line = (f"| {t} | {m['concat'] * 1e6:,.2f} | {m['step256'] * 1e6:,.2f} "
                f"| {m['ringkv'] * 1e6:,.2f} | {m['concat'] / m['ringkv']:,.1f}x "
                f"| {m['step256'] / m['ringkv']:,.1f}x |")
        if cpp:
            native = cpp[t]
            line += f" {native * 1e6:,.2f} | {(m['ringkv'] - native) * 1e6:,.2f} |"
        print(line)


def cpp_times(binary, lengths, repeat):
    """{T: seconds per token} of the C++ KVCache rows (bench_append.cc)."""
    times = cpp_bench.median_times(binary, f"^KVCache/T:({'|'.join(map(str, lengths))})/", repeat)
    by_length = {int(name.split("/")[1].split(":")[1]): t for name, t in times.items()}
    missing = sorted(set(lengths) - set(by_length))
    if missing:
        raise SystemExit(f"--cpp-bench: {binary} has no KVCache rows for T {missing}")
    return by_length


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384],
                        help="cache lengths T (multiples of 256)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row (median)")
    parser.add_argument("--concat-appends", type=int, default=32,
                        help="appends per concat run (each copies the whole cache)")
    parser.add_argument("--cpp-bench", metavar="PATH",
                        help="ringkv_cache_bench, to print the C++ KVCache time beside ringkv's")
    args = parser.parse_args(argv)
    for t in args.lengths:
        if t < STEP or t % STEP:
            parser.error(f"--lengths: {t} is not a positive multiple of {STEP}")
    print(f"append one token, Hkv {HEADS}, D {DIM}, f16; median of {args.repeat} runs; "
          f"numpy {np.__version__}, python {sys.version.split()[0]}")
    cpp = cpp_times(args.cpp_bench, args.lengths, args.repeat) if args.cpp_bench else None
    print_table(run(args.lengths, args.repeat, args.concat_appends), cpp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
