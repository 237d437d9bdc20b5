#!/usr/bin/python3
"""Decode step time against T per K/V dtype, with each dtype's bandwidth limit.

Reads Google Benchmark JSON from ringkv_bench and draws, for one decode family
(default the cold one, BM_DecodeCold: K+V from DRAM), one panel per thread count:
the measured step time of every dtype present (f32, bf16, f16, int8, int4, int4h, in that
order, and any other the JSON has) as solid lines, and the time the same dtype's
K+V bytes take at the bandwidth measured in the same run (the counter t_memory_us,
bench_sdpa.cc via roofline_counters.cc) as dashed lines of the same colour, and the
arithmetic limit (t_compute_us: the step's FLOPs at the FMA peak of the same run, one
for every dtype) as a dotted black line. A missing dtype is simply not drawn.

  build/rel/benchmarks/ringkv_bench --benchmark_filter='BM_DecodeCold/' \\
      --benchmark_out=decode.json --benchmark_out_format=json
  benchmarks/plot_decode.py decode.json docs/figures/decode_vs_T.png

Needs matplotlib: Debian's apt-get install python3-matplotlib, for /usr/bin/python3
(hence the interpreter line).
"""

import argparse
import collections
import json
import re
import sys

DTYPE_ORDER = ["f32", "bf16", "f16", "int8", "int4", "int4h"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="Google Benchmark JSON (--benchmark_out_format=json)")
    parser.add_argument("png", help="the figure to write")
    parser.add_argument("--family", default="BM_DecodeCold",
                        help="benchmark family to plot (default: BM_DecodeCold)")
    parser.add_argument("--title", default=None, help="figure title (default: family and CPU)")
    return parser.parse_args(argv)


def step_rows(report, family):
    """{(dtype, threads): {T: (time_ms, memory_limit_ms, compute_limit_ms)}} for the family.

    With --benchmark_repetitions the median aggregate is used; without, the single
    iteration run (the last one if a name repeats).
    """
    pattern = re.compile(r"^%s/([^/]+)/T:(\d+)/threads:(\d+)" % re.escape(family))
    scale_to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    plain, medians = {}, {}
    for run in report.get("benchmarks", []):
        match = pattern.match(run.get("run_name", run.get("name", "")))
        if not match or run.get("error_occurred"):
            continue
        if run.get("run_type") == "aggregate" and run.get("aggregate_name") != "median":
            continue
        dtype, t, threads = match.group(1), int(match.group(2)), int(match.group(3))
        time_ms = run["real_time"] * scale_to_ms[run.get("time_unit", "ns")]
        memory_ms = run["t_memory_us"] * 1e-3 if "t_memory_us" in run else None
        compute_ms = run["t_compute_us"] * 1e-3 if "t_compute_us" in run else None
        target = medians if run.get("run_type") == "aggregate" else plain
        target[(dtype, threads, t)] = (time_ms, memory_ms, compute_ms)
    chosen = medians if medians else plain
    rows = collections.defaultdict(dict)
    for (dtype, threads, t), value in chosen.items():
        rows[(dtype, threads)][t] = value
    return rows


def dtype_key(dtype):
    return (DTYPE_ORDER.index(dtype), "") if dtype in DTYPE_ORDER else (len(DTYPE_ORDER), dtype)


def main(argv):
    args = parse_args(argv)
    with open(args.json) as f:
        report = json.load(f)
    rows = step_rows(report, args.family)
    if not rows:
        sys.exit("no %s/<dtype>/T:<n>/threads:<n> rows in %s" % (args.family, args.json))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    dtypes = sorted({dtype for dtype, _ in rows}, key=dtype_key)
    thread_counts = sorted({threads for _, threads in rows})
    colours = {d: plt.get_cmap("tab10")(i) for i, d in enumerate(dtypes)}
    fig, axes = plt.subplots(1, len(thread_counts), figsize=(6.0 * len(thread_counts), 4.6),
                             sharey=True, squeeze=False)
    for ax, threads in zip(axes[0], thread_counts):
        for dtype in dtypes:
            points = rows.get((dtype, threads))
            if not points:
                continue
            ts = sorted(points)
            ax.plot(ts, [points[t][0] for t in ts], marker="o", color=colours[dtype],
                    label="%s measured" % dtype)
            limit_ts = [t for t in ts if points[t][1] is not None]
            if limit_ts:
                ax.plot(limit_ts, [points[t][1] for t in limit_ts], linestyle="--",
                        color=colours[dtype], label="%s bandwidth limit" % dtype)
        # The arithmetic limit does not depend on the dtype (the same multiply-adds
        # per key): one line, from the first dtype that has it.
        compute = {}
        for dtype in dtypes:
            for t, value in rows.get((dtype, threads), {}).items():
                if value[2] is not None:
                    compute.setdefault(t, value[2])
        if compute:
            cts = sorted(compute)
            ax.plot(cts, [compute[t] for t in cts], linestyle=":", color="black",
                    label="FMA limit (every dtype)")
        ax.set_xscale("log", base=2)
        all_ts = sorted({t for (_, th), points in rows.items() if th == threads for t in points})
        ax.set_xticks(all_ts)
        ax.set_xticklabels(["%dk" % (t // 1024) if t % 1024 == 0 else str(t) for t in all_ts])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("T (keys in the cache)")
        ax.set_title("%d thread%s" % (threads, "" if threads == 1 else "s"))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("decode step time (ms)")
    axes[0][-1].legend(fontsize="small")
    context = report.get("context", {})
    title = args.title or "%s, tier %s: Hq 32, Hkv 8, D 128 (%s)" % (
        args.family, context.get("ringkv_tier", "?"), context.get("date", "?")[:10])
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
