#!/usr/bin/env bash
# Installs what is missing, builds in Release and runs the main job. Extra
# arguments are passed to the demo (try --help). Build output goes to stderr,
# so stdout is the report alone (e.g. ./tools/demo.sh --json | jq .check).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh
build=build/release
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DRINGKV_BUILD_TESTS=OFF -DRINGKV_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target ringkv_demo >&2
exec "$build/tools/ringkv_demo" "$@"
