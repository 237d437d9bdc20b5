#!/usr/bin/env bash
# Runs clang-tidy (opt-in checks in .clang-tidy) over the library sources, using
# the compile database of a configured build directory (default build/test).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/test}"
[ -f "$build/compile_commands.json" ] || { echo "configure $build first (tools/test.sh)" >&2; exit 2; }
git ls-files 'lib/src/*.cc' 'lib/src/**/*.cc' 'kernels/src/*.cc' |
  xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet
