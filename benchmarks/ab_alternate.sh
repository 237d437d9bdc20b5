#!/usr/bin/env bash
# Runs two builds of ringkv_sdpa_probe in turn, round after round, on the same
# flags, and prints each round's best times, their ratio, and a summary: on a
# shared host the fast and slow periods then fall on both builds alike.
#
#   benchmarks/ab_alternate.sh 6 /tmp/before/ringkv_sdpa_probe build/test/benchmarks/ringkv_sdpa_probe \
#       --dtype f16 --kv-heads 8 --tokens 16384
#
# Build "before" from another commit, e.g.
#   git worktree add /tmp/before <commit> && cmake -S /tmp/before -B /tmp/before/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build /tmp/before/build --target ringkv_sdpa_probe
# Ratio = A / B: above 1, B is faster.
set -euo pipefail

if [[ $# -lt 3 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 <rounds >= 1> <probe A> <probe B> [ringkv_sdpa_probe flags...]" >&2
  exit 2
fi
rounds=$1
a=$2
b=$3
shift 3

best_us() {  # the "best <x> us" of one probe run
  local line
  line=$("$@")
  echo "$line" >&2
  sed -n 's/.*: best \([0-9.]*\) us.*/\1/p' <<<"$line"
}

results=()
for ((r = 1; r <= rounds; ++r)); do
  ta=$(best_us "$a" "$@")
  tb=$(best_us "$b" "$@")
  if [[ -z "$ta" || -z "$tb" ]]; then
    echo "round $r: a probe printed no time" >&2
    exit 1
  fi
  results+=("$ta $tb")
  awk -v r="$r" -v x="$ta" -v y="$tb" 'BEGIN { printf "round %d: A %s us, B %s us, A/B %.3f\n", r, x, y, x / y }'
done

printf '%s\n' "${results[@]}" | awk '
  function median(v, n,   i, j, t) {
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && v[j - 1] > v[j]; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  { ++n; a[n] = $1; b[n] = $2; q[n] = $1 / $2; amin = n == 1 || $1 < amin ? $1 : amin; bmin = n == 1 || $2 < bmin ? $2 : bmin }
  END {
    printf "A: min %.1f us, median %.1f us\n", amin, median(a, n)
    printf "B: min %.1f us, median %.1f us\n", bmin, median(b, n)
    printf "A/B: median of the %d paired ratios %.3f, ratio of the minima %.3f\n", n, median(q, n), amin / bmin
  }'
