"""The Python benchmarks run to the end at tiny sizes and print their tables
(no timing is asserted: this keeps the scripts from rotting)."""

import pathlib

from test_examples import REPO, run_script

BENCHMARKS = REPO / "benchmarks" / "python"


def assert_table(result, header):
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith(header) for line in lines), result.stdout
    return [line for line in lines if line.startswith("| ") and not line.startswith(header)]


def test_bench_append_prints_its_table():
    result = run_script(BENCHMARKS / "bench_append.py", "--lengths", "256", "512",
                        "--repeat", "1", "--concat-appends", "2")
    rows = assert_table(result, "| T | concat")
    assert [row.split("|")[1].strip() for row in rows] == ["256", "512"]


def test_bench_attention_prints_its_table():
    result = run_script(BENCHMARKS / "bench_attention.py", "--lengths", "16", "64",
                        "--repeat", "1", "--number", "2")
    rows = assert_table(result, "| T | history")
    assert [row.split("|")[1].strip() for row in rows] == ["16", "64"]


FAKE_BENCH = """#!{python}
# Stands in for a Google Benchmark binary: writes what --benchmark_out would hold.
import json, sys
args = dict(a.split("=", 1) for a in sys.argv[1:])
runs = []
for name, times in {runs!r}.items():
    for t in times:
        runs.append({{"name": name, "run_name": name, "run_type": "iteration",
                     "real_time": t, "time_unit": "us"}})
    runs.append({{"name": name + "_median", "run_name": name, "run_type": "aggregate",
                 "real_time": 1e9, "time_unit": "us"}})
with open(args["--benchmark_out"], "w") as f:
    json.dump({{"benchmarks": runs}}, f)
"""


def fake_bench(tmp_path, runs):
    import sys

    path = tmp_path / "fake_bench"
    path.write_text(FAKE_BENCH.format(python=sys.executable, runs=runs))
    path.chmod(0o755)
    return str(path)


def test_cpp_columns_come_from_the_cpp_benchmark(tmp_path):
    binary = fake_bench(tmp_path, {"BM_Decode/f16/T:16/threads:1/real_time": [3.0, 1.0, 2.0],
                                   "BM_Decode/f16/T:64/threads:1/real_time": [5.0, 5.0, 5.0]})
    result = run_script(BENCHMARKS / "bench_attention.py", "--lengths", "16", "64",
                        "--repeat", "3", "--number", "2", "--cpp-bench", binary)
    rows = assert_table(result, "| T | history")
    # The median of the iterations (aggregates ignored), in µs.
    assert [row.split("|")[7].strip() for row in rows] == ["2.0", "5.0"]

    binary = fake_bench(tmp_path, {"KVCache/T:256/iterations:16384": [0.5, 0.25, 0.75]})
    result = run_script(BENCHMARKS / "bench_append.py", "--lengths", "256", "--repeat", "3",
                        "--concat-appends", "2", "--cpp-bench", binary)
    rows = assert_table(result, "| T | concat")
    assert rows[0].split("|")[7].strip() == "0.50"
