#!/usr/bin/env bash
# Installs every Debian 12 package troupe needs, and nothing else: the list
# is TROUPE_PACKAGES in scripts/needs.sh (docs/DEPENDENCIES.md says why each).
# Idempotent: packages already present are not touched, and apt is not even
# asked when nothing is missing. Needs root (or sudo) only when something is
# missing. It never downloads anything but Debian packages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/needs.sh"
packages=("${TROUPE_PACKAGES[@]}")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

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
