#!/usr/bin/env bash
# Runs the whole benchmark suite with a short min_time (a few minutes per tier on
# two cores) once per kernel tier this machine runs, with RINGKV_ISA=<tier>, and
# prints each run's summary table only: one line per case with its limit and the
# fraction of it reached, under a header that names the tier. Every kernel case
# is held to its own tier's FMA peak (docs/benchmarks.md). Extra arguments go to
# the binary, e.g.
#   benchmarks/run_summary.sh build/rel/benchmarks/ringkv_bench --benchmark_filter=Decode
# RINGKV_TIERS="avx2 avx512" limits the run to those tiers (default: every tier
# `ringkv_bench --list_tiers` prints, lowest first).
set -euo pipefail
bench="${1:-build/release/benchmarks/ringkv_bench}"
shift || true
if [ ! -x "$bench" ]; then
  echo "usage: $0 <path to ringkv_bench> [benchmark flags]" >&2
  exit 2
fi
tiers="${RINGKV_TIERS:-$(env -u RINGKV_ISA "$bench" --list_tiers)}"
for tier in $tiers; do
  RINGKV_ISA="$tier" "$bench" --benchmark_min_time=0.05 "$@" 2>/dev/null |
    awk '/^ringkv benchmark summary/ { on = 1 } on'
done
