#!/usr/bin/env bash
# Runs a command with the CPU benchmark bundle beside this script
# (scripts/cpu-bench-bundle.sh made it): unpacks bundle.tar.xz once into
# $TROUPE_BUNDLE_DIR (default /tmp/troupe-cpu-bundle), then runs the command
# in the current directory with TROUPE_BUILD_DIR (the bundle: cli/troupe,
# bench/...), LD_LIBRARY_PATH (its lib/) and TROUPE_FASHION_MNIST_DIR (its
# data) set.
#
#   build-dev/run.sh bench/idle_cores.sh
#   build-dev/run.sh bench/sealed_ring.sh 5
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${TROUPE_BUNDLE_DIR:-/tmp/troupe-cpu-bundle}
if [[ ! -f $dir/MANIFEST || $dir/MANIFEST -ot $here/bundle.tar.xz ]]; then
  rm -rf "$dir" && mkdir -p "$dir"
  xz -dc "$here/bundle.tar.xz" | tar -C "$dir" -xf -
  touch "$dir/MANIFEST"
fi
export TROUPE_BUILD_DIR=$dir
export LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TROUPE_FASHION_MNIST_DIR=$dir/data/fashion-mnist
[[ $# -gt 0 ]] || { sed -n 2,3p "$dir/MANIFEST"; exit 0; }
exec "$@"
