#!/usr/bin/env bash
# Runs the whole benchmark suite with a short min_time (a few minutes on two
# cores) and prints the summary table only: one line per case with its limit
# and the fraction of it reached. Extra arguments go to the binary, e.g.
#   benchmarks/run_summary.sh build/vec/benchmarks/ringkv_bench --benchmark_filter=Decode
set -euo pipefail
bench="${1:-build/release/benchmarks/ringkv_bench}"
shift || true
if [ ! -x "$bench" ]; then
  echo "usage: $0 <path to ringkv_bench> [benchmark flags]" >&2
  exit 2
fi
"$bench" --benchmark_min_time=0.05 "$@" 2>/dev/null | awk '/^ringkv benchmark summary/ { on = 1 } on'
