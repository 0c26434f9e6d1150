#!/usr/bin/env bash
# Installs every Debian 12 package troupe needs, and nothing else: the list
# is TROUPE_PACKAGES in scripts/needs.sh (docs/DEPENDENCIES.md says why each).
# Idempotent: packages already present are not touched, and apt is not even
# asked when nothing is missing. Needs root (or sudo) only when something is
# missing. Beside Debian packages it fetches one thing, once: npm's
# onnxruntime-node (Debian has no onnxruntime), the independent runtime the
# ONNX export tests run (tests/export/ort_compare.js), into
# $TROUPE_ONNXRUNTIME_NODE (default ~/.cache/troupe/onnxruntime-node);
# TROUPE_NO_NPM=1 skips it, and those tests then skip saying so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/needs.sh"
packages=("${TROUPE_PACKAGES[@]}")

# A package is present when it is installed, or when an installed package
# provides it: NodeSource's nodejs provides npm, and installing Debian's npm
# beside it would replace that nodejs.
# (The list is read whole before grep -q: under pipefail, grep -q leaving
# early would fail the pipe.)
installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" && return 0
  local provided
  provided=$(dpkg-query -W -f='${Status}|${Provides}\n' 2>/dev/null | grep '^install ok installed|' || true)
  grep -qE "[|, ]$1( |,|$)" <<< "$provided"
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "setup: done"
fi

# onnxruntime-node, pinned: 1.20.1 runs on Debian 12's node 18 (N-API 3)
# and reads opset 17. --ignore-scripts: its install script would download
# GPU libraries from outside npm; the CPU library is inside the package.
ort_dir=${TROUPE_ONNXRUNTIME_NODE:-$HOME/.cache/troupe/onnxruntime-node}
ort_version=1.20.1
if [ "${TROUPE_NO_NPM:-0}" = 1 ]; then
  echo "setup: TROUPE_NO_NPM=1: onnxruntime-node not installed (the onnxruntime tests skip)"
elif grep -qs "\"version\": \"$ort_version\"" "$ort_dir/node_modules/onnxruntime-node/package.json"; then
  echo "setup: onnxruntime-node $ort_version present in $ort_dir"
else
  echo "setup: npm install onnxruntime-node@$ort_version into $ort_dir"
  mkdir -p "$ort_dir"
  # Three tries: a registry's transient error must not fail a whole run.
  installed=0
  for attempt in 1 2 3; do
    if (cd "$ort_dir" && npm install --no-audit --no-fund --no-save --ignore-scripts "onnxruntime-node@$ort_version"); then
      installed=1
      break
    fi
    echo "setup: npm install failed (attempt $attempt of 3)" >&2
    sleep $((attempt * 5))
  done
  if [ "$installed" != 1 ]; then
    echo "setup: npm could not install onnxruntime-node into $ort_dir (TROUPE_NO_NPM=1 skips it)" >&2
    exit 1
  fi
fi
