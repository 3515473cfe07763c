#!/usr/bin/env bash
# The whole test suite: GoogleTest (CTest), the Python reference checks (pytest against PyTorch,
# transformers, tokenizers and gguf-py), the kernel tests again under ASan/UBSan, and a bounded
# libFuzzer run of the GGUF parser under ASan/UBSan. Installs what is missing first
# (scripts/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}

scripts/install_deps.sh
scripts/build.sh
echo "== GoogleTest (ctest)"
ctest --test-dir build --output-on-failure -j2
echo "== Python reference checks (pytest)"
SYSLM_BUILD_DIR="$PWD/build" .venv/bin/python -m pytest -q tests/reference
echo "== kernel tests under ASan/UBSan"
tests/sanitize_kernels.sh
echo "== libFuzzer: GGUF parser for ${FUZZ_SECONDS}s under ASan/UBSan"
tests/fuzz/run_fuzz.sh "$FUZZ_SECONDS"
