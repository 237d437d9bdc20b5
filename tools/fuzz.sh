#!/usr/bin/env bash
# Builds the file loaders' fuzzers with clang 14 (libFuzzer + ASan + UBSan) in
# build/fuzz: PromptCache::Load and LoadCaches (both formats share the corpus),
# and runs each for a bounded time on a copy of fuzz/corpus.
#   tools/fuzz.sh [seconds]      per fuzzer, default 60
# Exits non-zero when the fuzzer finds a crash (the reproducer is left in build/fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"

tools/install_deps.sh clang-14 libclang-rt-14-dev
build=build/fuzz
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 \
  -DRINGKV_BUILD_TESTS=OFF -DRINGKV_BUILD_BENCHMARKS=OFF -DRINGKV_BUILD_TOOLS=OFF \
  -DRINGKV_BUILD_FUZZERS=ON
cmake --build "$build" --parallel "$(nproc)" --target ringkv_prompt_load_fuzzer ringkv_caches_load_fuzzer ringkv_sequence_load_fuzzer

# The committed seeds stay untouched; new inputs go to the working corpus.
corpus="$build/corpus"
mkdir -p "$corpus"
cp fuzz/corpus/* "$corpus/"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for fuzzer in ringkv_prompt_load_fuzzer ringkv_caches_load_fuzzer ringkv_sequence_load_fuzzer; do
  "$build/fuzz/$fuzzer" "$corpus" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$build/$fuzzer-" -print_final_stats=1
done
