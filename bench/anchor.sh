# Sourced by the bench/compare_*.sh scripts: finds the PyTorch anchor
# (../shared/anchors/torch_anchor.py, or $TROUPE_ANCHOR), installs Debian's
# python3-torch when it is missing, and builds troupe when it is not built.
# Sets: root, build, anchor.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}
anchor=${TROUPE_ANCHOR:-$root/../shared/anchors/torch_anchor.py}

[ -f "$anchor" ] || { echo "$(basename "$0"): anchor script not found at $anchor (set TROUPE_ANCHOR)" >&2; exit 1; }
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "$(basename "$0"): installing python3-torch (Debian) for the anchor" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3-torch
fi
[ -x "$build/cli/troupe" ] || "$root/scripts/build.sh"
