#!/usr/bin/env bash
# The repository holds everything its build, tests, scripts and benchmarks read: nothing may reach
# outside it for data (a developer machine may have a `shared/` folder beside the checkout; a
# clone from the public repository does not). Fails listing each line that points outside.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
parent='\.\.'/shared
found=$(grep -rnI -e "$parent" -e 'parent / "shared"' -e 'parents\[[0-9]\] / "shared"' \
          -e 'PROJECT_SOURCE_DIR}/\.\.' src tests bench scripts .ci CMakeLists.txt \
          --exclude=self_contained.sh || true)
if [ -n "$found" ]; then
  echo "these lines read data from outside the repository:"
  echo "$found"
  exit 1
fi
echo "ok: nothing outside the repository is read"
