#!/usr/bin/env bash
# The main job (README.md). Until the trainer lands it builds troupe and runs
# the kernel benchmark: the speed of the fast CPU kernels at the seed models'
# shapes, beside the machine's sgemm ceiling.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
OPENBLAS_NUM_THREADS=1 "$build/bench/bench_kernels" --benchmark_min_time=0.2 "$@"
