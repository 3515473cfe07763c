#!/usr/bin/env bash
# Fuzzes the GGUF parser for a bounded time under libFuzzer + ASan + UBSan.
#
#   tests/fuzz/run_fuzz.sh [SECONDS]      (default 60)
#
# Configures its own build directory with clang (SYSLM_FUZZ_BUILD, default <repo>/build-fuzz),
# builds only the fuzz target and the seed writer, writes a seed corpus (small valid GGUF files
# from syslm's writer, shortened copies of tests/fixtures/vocab/*.gguf, and the first 64 KiB of
# the real vocab files), then runs. Exits non-zero on any crash, sanitizer report, leak or timeout;
# the offending input is saved under <build>/fuzz-artifacts/.
set -euo pipefail

seconds="${1:-60}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${SYSLM_FUZZ_BUILD:-$repo/build-fuzz}"
jobs="${SYSLM_FUZZ_BUILD_JOBS:-2}"

mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSYSLM_FUZZ=ON -DSYSLM_TESTS=OFF >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target gguf_fuzz gguf_fuzz_seeds -j "$jobs"

seeds="$build/gguf-seeds"
corpus="$build/gguf-corpus"   # grows across runs: new coverage found is kept here
artifacts="$build/fuzz-artifacts"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"

vocab=("$repo"/tests/fixtures/vocab/*.gguf)
ASAN_OPTIONS=detect_leaks=1 "$build/tests/fuzz/gguf_fuzz_seeds" "$seeds" "${vocab[@]}"
for f in "${vocab[@]}"; do
    head -c 65536 "$f" >"$seeds/head-$(basename "$f")"
done

echo "run_fuzz.sh: fuzzing the GGUF parser for ${seconds}s ($(ls "$seeds" | wc -l) seeds)"
# -max_len bounds input size so each iteration stays fast; -rss_limit_mb and -malloc_limit_mb
# turn "allocates gigabytes because a length field said so" into a reported failure.
ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
"$build/tests/fuzz/gguf_fuzz" \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -print_final_stats=1 -dict="$repo/tests/fuzz/gguf.dict" \
    -artifact_prefix="$artifacts/" "$corpus" "$seeds"
