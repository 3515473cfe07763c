#!/usr/bin/env bash
# Configures and builds syslm (Release) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
