#!/usr/bin/env bash
# Installs what is missing, configures, builds (warnings as errors) and runs every test.
#   tools/test.sh                 the normal build, in build/test
#   tools/test.sh --sanitize      AddressSanitizer + UBSan, in build/sanitize
set -euo pipefail
cd "$(dirname "$0")/.."

mode=test
cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${1:-}" = "--sanitize" ]; then
  mode=sanitize
  # Benchmarks are not run under the sanitizers; tools are (the demo test).
  cmake_args=(-DCMAKE_BUILD_TYPE=Debug -DRINGKV_ASAN=ON -DRINGKV_UBSAN=ON
              -DRINGKV_BUILD_BENCHMARKS=OFF)
fi

tools/install_deps.sh
build="build/$mode"
cmake -S . -B "$build" -G Ninja -DRINGKV_WERROR=ON "${cmake_args[@]}"
cmake --build "$build" --parallel "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)"
