#!/usr/bin/env bash
# The main job (README.md): trains the seed CNN (the Keras MNIST model) on
# Fashion-MNIST from Debian's dataset-fashion-mnist and prints the test
# accuracy. Extra arguments go to `troupe train`, e.g. --epochs 5.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
exec "$build/cli/troupe" train --model cnn --data fashion-mnist --epochs 2 --batch 64 \
  --optimizer adam --lr 1e-3 "$@"
