"""Runs a C++ Google Benchmark binary of this repository and reads its times, so a
Python benchmark can print the C++ time of the same shape from the same session."""

import json
import os
import statistics
import subprocess
import tempfile


def median_times(binary, name_regex, repetitions, min_time=0.2):
    """{run name: median real time in seconds} of the benchmarks matching name_regex."""
    with tempfile.TemporaryDirectory(prefix="ringkv_cpp_bench_") as tmp:
        out = os.path.join(tmp, "out.json")
        result = subprocess.run([binary, f"--benchmark_filter={name_regex}",
                                 f"--benchmark_repetitions={repetitions}",
                                 f"--benchmark_min_time={min_time}",
                                 f"--benchmark_out={out}", "--benchmark_out_format=json"],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{binary} exited with {result.returncode}:\n{result.stderr}")
        with open(out, encoding="utf-8") as f:
            report = json.load(f)
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    times = {}
    for run in report["benchmarks"]:
        if run.get("run_type", "iteration") != "iteration":
            continue  # aggregates: the median is taken here
        times.setdefault(run["run_name"], []).append(run["real_time"] * scale[run["time_unit"]])
    return {name: statistics.median(t) for name, t in times.items()}
