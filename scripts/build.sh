#!/usr/bin/env bash
# Configures and builds troupe in ./build (or $TROUPE_BUILD_DIR), after making
# sure every Debian package it needs is installed. Extra arguments go to
# CMake, e.g. scripts/build.sh -DTROUPE_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}

"$root/scripts/setup.sh"

jobs=$(nproc 2>/dev/null || echo 2)
# ccache, where the machine has it, lets several checkouts (git worktrees,
# a fresh clone in CI) share compiled objects; it is optional and never
# installed by setup.sh. The base dir makes its keys independent of where
# the checkout lies.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_WERROR=ON "${launcher[@]}" "$@"
cmake --build "$build" -j "$jobs"
