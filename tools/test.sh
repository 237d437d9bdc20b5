#!/usr/bin/env bash
# Installs what is missing, configures, builds (warnings as errors) and runs every test.
#   tools/test.sh                 the normal build, in build/test
#   tools/test.sh --sanitize      AddressSanitizer + UBSan (Debug, -O1; most test code -O0),
#                                 in build/sanitize
#   tools/test.sh --tsan          ThreadSanitizer (RelWithDebInfo), kernel, lib and
#                                 cache suites, in build/tsan
#   tools/test.sh --arm64         AArch64 cross build (scalar + NEON tiers), kernel, lib
#                                 and cache suites under qemu-user, in build/arm64 (docs/arm64.md)
# Each runs its whole ctest suite, which includes the end-to-end suites once per
# kernel tier this machine has (label "tier", docs/kernels.md "Capping the tier");
# --tsan leaves those per-tier reruns out. Each prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

mode=test
# -g1 (line tables: backtraces and sanitizer reports keep file:line) instead of -g
# compiles a fifth faster (docs/ci.md).
rel_with_line_tables=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
# The test suites' own code is compiled at -O1 (-O0 under the sanitizers), the
# library, kernels and float64 oracle they exercise, and the prompt-suite units
# whose tests spend their time in their own code, at the build type's level:
# compiling test code is most of CI's time, running it is not (docs/ci.md).
test_code_O1=(-DRINGKV_TEST_CODE_FLAGS=-O1)
cmake_args=("${rel_with_line_tables[@]}" "${test_code_O1[@]}")
ctest_args=()
# The AVX-512 tier's unit takes a minute of compiler time under the sanitizers.
# On a CPU without AVX-512F that code never runs, so the sanitizer jobs leave the
# tier out there; the normal build still compiles it and checks that it is refused.
skip_avx512_here=()
grep -qw avx512f /proc/cpuinfo || skip_avx512_here=(-DRINGKV_ENABLE_AVX512=OFF)
case "${1:-}" in
  "") ;;
  --sanitize)
    mode=sanitize
    # Benchmarks are not run under the sanitizers; tools are (the demo test).
    # Debug keeps assertions and the GSL contract checks; -O1 (the level the
    # AddressSanitizer documentation recommends) rather than -O0 about halves the
    # suite's time under the sanitizers for a third more compile time (docs/ci.md).
    # The Python module's binding code at -O0 compiles in half the time; the
    # library it calls keeps -O1.
    cmake_args=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1"
                -DRINGKV_TEST_CODE_FLAGS=-O0 -DRINGKV_PYTHON_CODE_FLAGS=-O0
                -DRINGKV_ASAN=ON -DRINGKV_UBSAN=ON
                -DRINGKV_BUILD_BENCHMARKS=OFF "${skip_avx512_here[@]}")
    ;;
  --tsan)
    mode=tsan
    # Optimised, so that the races TSan sees are those of the code that ships.
    # No Python module: a TSan extension inside an uninstrumented CPython is not
    # supported by the TSan runtime; the module's C++ is the library's, which runs here.
    # The kernel, lib and cache suites only (RINGKV_CORE_TESTS_ONLY): the thread
    # pool, the parallel kernels (the batched one included), Context and the
    # concurrent use of caches are tested there; the other suites drive the same
    # threads through the same calls and would double the job (docs/ci.md). No
    # tools, and no prompt cache in the library, which those suites do not use.
    cmake_args=("${rel_with_line_tables[@]}" "${test_code_O1[@]}" -DRINGKV_TSAN=ON
                -DRINGKV_CORE_TESTS_ONLY=ON -DRINGKV_BUILD_BENCHMARKS=OFF
                -DRINGKV_BUILD_PYTHON=OFF -DRINGKV_BUILD_TOOLS=OFF -DRINGKV_INSTALL=OFF
                "${skip_avx512_here[@]}")
    # Without the per-tier reruns of those suites: the threads, the pool and the
    # work split are the same on every tier (only the arithmetic inside a task
    # differs), and the kernel suites still run every tier with threads.
    ctest_args=(--label-exclude tier)
    ;;
  --arm64)
    mode=arm64
    # Emulation is slow (docs/arm64.md): the kernel, lib and cache suites only
    # (RINGKV_CORE_TESTS_ONLY, so no prompt cache in the library), no debug info,
    # and no benchmarks, Python, tools or fuzzers, which are x86-only or need a
    # host interpreter.
    cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG"
                "${test_code_O1[@]}" --toolchain cmake/toolchains/aarch64-linux-gnu.cmake
                -DRINGKV_CORE_TESTS_ONLY=ON -DRINGKV_BUILD_BENCHMARKS=OFF -DRINGKV_BUILD_PYTHON=OFF -DRINGKV_BUILD_TOOLS=OFF
                -DRINGKV_BUILD_FUZZERS=OFF -DRINGKV_INSTALL=OFF)
    ;;
  *)
    echo "usage: tools/test.sh [--sanitize | --tsan | --arm64]" >&2
    exit 2
    ;;
esac

if [ "$mode" = arm64 ]; then
  # The cross compiler, qemu-user, and the arm64 builds of the compiled
  # dependencies (multiarch); header-only ones come from the host's /usr.
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${as_root[@]}" dpkg --add-architecture arm64
  fi
  tools/install_deps.sh crossbuild-essential-arm64 qemu-user libgtest-dev:arm64 \
    libgmock-dev:arm64 libfmt-dev:arm64 libxxhash-dev:arm64 libxsimd-dev:arm64
else
  tools/install_deps.sh
fi
build="build/$mode"
# ccache lets the build_options and subdirectory_consumer tests reuse this build's
# objects instead of compiling the library again for each tree: paths are hashed
# relative to the source tree, and the working directory not at all, so a tree
# next to this one compiles with the same keys (tests/sub_build.cmake).
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi
cmake -S . -B "$build" -G Ninja -DRINGKV_WERROR=ON "${cmake_args[@]}"
cmake --build "$build" --parallel "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" "${ctest_args[@]}"
echo "tools/test.sh ${1:-}: passed in $((SECONDS - started)) s"
