#!/usr/bin/env bash
# The kernel layer's GoogleTest suite built with ASan + UBSan (g++), run once in one process and
# once more for the test that must run first in its process (the first AMX prefill decision is
# measured through the caller's thread_local buffers: a use-after-free there once crashed
# `syslm bench -p 64` while every test passed). Hand-written SIMD kernels index buffers by
# computed offsets; this is where an overrun shows up as a report instead of a wrong answer.
#
#   tests/sanitize_kernels.sh        (build directory: SYSLM_SANITIZE_BUILD, default build-asan)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SYSLM_SANITIZE_BUILD:-$repo/build-asan}"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p "$build"
[ -f "$build/build.ninja" ] ||
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
        >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target syslm_kernels_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
# The timing code runs under the sanitizers too: no remembered kernel choices (ctest does the same).
export SYSLM_KERNEL_CACHE=off
"$build/tests/syslm_kernels_tests" --gtest_brief=1
"$build/tests/syslm_kernels_tests" --gtest_brief=1 \
    --gtest_filter=Attention.FirstPrefillMeasuresTheChoiceSafely
