#!/usr/bin/env bash
# Configures and builds troupe in ./build (or $TROUPE_BUILD_DIR), after making
# sure every Debian package it needs is installed. Extra arguments go to
# CMake, e.g. scripts/build.sh -DTROUPE_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}

"$root/scripts/setup.sh"

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_WERROR=ON "$@"
cmake --build "$build" -j "$jobs"
