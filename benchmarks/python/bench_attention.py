#!/usr/bin/env python3
"""Decode attention time from Python: one query token over T cached tokens.

Hq 32, Hkv 8, D 128, f16 K/V, float32 q and output, one ringkv thread (--threads):
  history  ringkv.attention(q, history, "causal", out=, ctx=) over a KVCache's
           history (the decode loop's call: the blocks read in place)
  sdpa     ringkv.scaled_dot_product_attention(q, k, v, None, out=, ctx=) over
           contiguous f16 arrays [1, Hkv, T, D] (the shape and mask of the C++
           kernel benchmark BM_Decode/f16 in benchmarks/bench_sdpa.cc, so the
           difference at small T is the cost of the Python call and the library's
           validation, see docs/python.md)
  numpy    the same attention in numpy float32 (K/V kept as float32: numpy has no
           fast float16 matmul), BLAS limited to --threads threads
Median of --repeat samples of --number calls each, the three interleaved. With
--cpp-bench <build>/benchmarks/ringkv_bench, BM_Decode/f16 at the same T and
threads is run first and printed beside sdpa (the difference is the cost of the
Python call and the library's validation over the bare kernel).

    PYTHONPATH=build/dev/python python3 benchmarks/python/bench_attention.py
"""

import argparse
import os
import statistics
import sys
import time


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 256, 1024, 4096, 16384],
                        help="cached tokens T")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=7, help="samples per cell (median)")
    parser.add_argument("--number", type=int, default=0,
                        help="calls per sample (default: about 20 ms of calls)")
    parser.add_argument("--cpp-bench", metavar="PATH",
                        help="ringkv_bench, to print BM_Decode/f16 beside sdpa")
    return parser.parse_args(argv)


ARGS = parse_args(sys.argv[1:] if __name__ == "__main__" else [])
# numpy's BLAS reads these when it is loaded: the baseline gets the threads ringkv gets.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, str(ARGS.threads))

import numpy as np  # noqa: E402

import cpp_bench  # noqa: E402
import ringkv  # noqa: E402

HQ, HKV, DIM = 32, 8, 128


def numpy_attention(q, k, v, scale):
    """q [Hkv, Hq/Hkv, D], k/v [Hkv, T, D] float32 -> [Hkv, Hq/Hkv, D]."""
    s = (q @ k.transpose(0, 2, 1)) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def per_call(fn, number):
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def calibrate(fn):
    """Calls per sample: about 20 ms worth, at least 3."""
    return max(3, int(0.02 / max(per_call(fn, 3), 1e-9)))


def run(lengths, threads, repeat, number):
    ctx = ringkv.Context(threads=threads)
    rng = np.random.default_rng(0)
    scale = 1.0 / np.sqrt(DIM)
    rows = []
    for t in lengths:
        k = rng.standard_normal((1, HKV, t, DIM)).astype(np.float16)
        v = rng.standard_normal((1, HKV, t, DIM)).astype(np.float16)
        q = rng.standard_normal((1, HQ, 1, DIM)).astype(np.float32)
        out = np.empty((1, HQ, 1, DIM), np.float32)
        cache = ringkv.KVCache(dtype="f16")
        history = cache.update(k, v)
        k32, v32 = k[0].astype(np.float32), v[0].astype(np.float32)
        q32 = q.reshape(HKV, HQ // HKV, DIM)  # query head h reads kv head h // (Hq/Hkv)

        cells = {
            "history": lambda: ringkv.attention(q, history, "causal", out=out, ctx=ctx),
            "sdpa": lambda: ringkv.scaled_dot_product_attention(q, k, v, None, out=out, ctx=ctx),
            "numpy": lambda: numpy_attention(q32, k32, v32, scale),
        }
        # A correctness guard, so a broken binding cannot post a fast time.
        expected = numpy_attention(q32, k32, v32, scale).reshape(1, HQ, 1, DIM)
        for name in ("history", "sdpa"):
            cells[name]()
            if not np.allclose(out, expected, rtol=1e-3, atol=1e-3):
                raise RuntimeError(f"{name} at T {t}: output differs from numpy")
        counts = {name: number or calibrate(fn) for name, fn in cells.items()}
        samples = {name: [] for name in cells}
        for _ in range(repeat):
            for name, fn in cells.items():
                samples[name].append(per_call(fn, counts[name]))
        rows.append((t, {name: statistics.median(s) for name, s in samples.items()}))
    return rows


def print_table(rows, cpp):
    print("| T | history µs | sdpa µs | numpy f32 µs | numpy / history | K+V GB/s (history) |"
          + (" C++ kernel µs | sdpa − C++ µs |" if cpp else ""))
    print("|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if cpp else ""))
    for t, m in rows:
        kv_bytes = 2 * HKV * t * DIM * 2
        line = (f"| {t} | {m['history'] * 1e6:,.1f} | {m['sdpa'] * 1e6:,.1f} "
                f"| {m['numpy'] * 1e6:,.1f} | {m['numpy'] / m['history']:,.1f}x "
                f"| {kv_bytes / m['history'] * 1e-9:,.1f} |")
        if cpp and t in cpp:
            line += f" {cpp[t] * 1e6:,.1f} | {(m['sdpa'] - cpp[t]) * 1e6:,.1f} |"
        elif cpp:
            line += " – | – |"  # a T the C++ benchmark does not run
        print(line)


def cpp_times(binary, lengths, threads, repeat):
    """{T: seconds per call} of BM_Decode/f16 (benchmarks/bench_sdpa.cc), for the T it runs
    (256 and up: a smaller T shows the Python call's fixed cost without a C++ row)."""
    regex = f"^BM_Decode/f16/T:({'|'.join(map(str, lengths))})/threads:{threads}/"
    times = cpp_bench.median_times(binary, regex, repeat)
    return {int(name.split("/")[2].split(":")[1]): t for name, t in times.items()}


def blas():
    """The BLAS library numpy loaded (its matmul speed depends on it)."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        names = {os.path.basename(line.split()[-1]) for line in maps if "blas" in line.lower()}
    return ", ".join(sorted(names)) or "unknown"


def main():
    args = ARGS
    print(f"decode attention, Hq {HQ}, Hkv {HKV}, D {DIM}, f16 K/V, {args.threads} thread(s); "
          f"median of {args.repeat}; numpy {np.__version__}, python {sys.version.split()[0]}, "
          f"ringkv tier {ringkv.Context(threads=args.threads).tier}, numpy BLAS {blas()}")
    cpp = cpp_times(args.cpp_bench, args.lengths, args.threads, args.repeat) if args.cpp_bench \
        else None
    print_table(run(args.lengths, args.threads, args.repeat, args.number), cpp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
