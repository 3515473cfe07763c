#!/usr/bin/env bash
# Installs what syslm needs to build and test on Debian 12: compilers and libraries from Debian,
# and the Python references (PyTorch, transformers, gguf-py) into .venv from PyPI.
# --no-python skips the Python references (they are only needed by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PACKAGES=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
          nlohmann-json3-dev libcli11-dev libpcre2-dev libgtest-dev libgmock-dev libopenblas-dev
          libopenmpi-dev openmpi-bin chromium chromium-driver
          libjs-marked libjs-highlight.js node-dompurify
          bible-kjv fortunes fortunes-de fortunes-it fortunes-es fortunes-ru fortunes-pl fortunes-eo
          wordnet-base python3-venv strace iproute2)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ "${1:-}" = "--no-python" ] && exit 0
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import torch, transformers, gguf, pytest, openai, selenium, jinja2, schemathesis, peft, rfc3339_validator, datasketch, nltk" 2>/dev/null; then
  echo "install_deps: creating .venv with the Python references (torch, transformers, gguf, ...)"
  # PyPI's torch brings its CUDA libraries: ~6 GB installed, more while pip unpacks. Say so
  # before pip fails half-way with "No space left on device".
  need_gib=9
  avail_gib=$(df --output=avail -BG . | tail -1 | tr -dc 0-9)
  if [ "$avail_gib" -lt "$need_gib" ]; then
    echo "install_deps: $PWD has ${avail_gib} GiB free; the Python references need about" \
         "${need_gib} GiB (PyPI's torch with its CUDA libraries). Free space, or run" \
         "scripts/install_deps.sh --no-python to skip them." >&2
    exit 1
  fi
  python3 -m venv .venv
  # No wheel cache: torch with its CUDA libraries is ~6 GB installed; a cache would double it.
  .venv/bin/pip install -q --no-cache-dir --upgrade pip
  .venv/bin/pip install -q --no-cache-dir -r tests/reference/requirements.txt
fi
