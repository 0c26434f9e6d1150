#!/usr/bin/env bash
# The test command (README.md, and .ci/run): installs what is missing,
# checks that every program the tests run is there (scripts/check-commands.sh:
# a fresh Debian 12 has less than our CI machines) and that the C++ keeps
# its format (scripts/check-format.sh) and its layers' include directions
# (scripts/check-includes.sh), builds with CUDA when
# the toolkit is found, and runs every test. GPU tests skip with a message
# on a machine without a GPU. Extra arguments go to ctest, e.g.
# scripts/test.sh -L unit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}

"$root/scripts/setup.sh"
"$root/scripts/check-commands.sh"
"$root/scripts/check-format.sh"
"$root/scripts/check-includes.sh"
"$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure --timeout 900 -j "$(nproc 2>/dev/null || echo 2)" "$@"
