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
