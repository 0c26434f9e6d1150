#!/usr/bin/env bash
# The main job (README.md): trains the seed CNN (the Keras MNIST model) on
# Fashion-MNIST from Debian's dataset-fashion-mnist across two local devices
# (every GPU where there are GPUs, otherwise two CPU devices): synchronous
# all-reduce for the first epoch, switched to asynchronous parameter-server
# training mid-way without a restart, then prints the test accuracy. Extra
# arguments go to `troupe train`, e.g. --epochs 5.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
# 60000 examples / (64 per replica x 2 replicas) = 468 synchronous steps per epoch.
exec "$build/cli/troupe" train --model cnn --data fashion-mnist --epochs 2 --batch 64 \
  --optimizer adam --lr 1e-3 --mode sync --switch 468:async "$@"
