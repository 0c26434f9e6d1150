#!/usr/bin/env bash
# Checks that every program troupe's build, tests, examples and main job run
# (TROUPE_COMMANDS in scripts/needs.sh) is installed where Debian puts it,
# and that the package it comes from is one scripts/setup.sh installs or
# one that every Debian system has (priority "required"). Our CI machines
# come with more than a minimal Debian 12 (python3, iproute2, ...): without
# this check a program used but never installed passes there and fails on
# a fresh machine. scripts/test.sh runs it after setup.sh; it exits 1,
# naming the command and its package, at anything wrong.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/needs.sh"

# Debian's own folders only: a python3 of pyenv or a cmake in /usr/local
# would hide a package that setup.sh forgot.
debian_path=/usr/sbin:/usr/bin:/sbin:/bin
declare -A ours=()
for p in "${TROUPE_PACKAGES[@]}"; do ours[$p]=1; done

failed=0
for entry in "${TROUPE_COMMANDS[@]}"; do
  read -r cmd package <<< "$entry"
  if [[ -z "${ours[$package]:-}" ]]; then
    echo "check-commands: $cmd is said to come from $package, which scripts/needs.sh's TROUPE_PACKAGES does not list" >&2
    failed=1
    continue
  fi
  path=$(PATH=$debian_path command -v "$cmd" || true)
  if [[ -z "$path" ]]; then
    echo "check-commands: $cmd is not installed: install Debian's $package (scripts/setup.sh does)" >&2
    failed=1
    continue
  fi
  # The package that owns the file (through links: /usr/bin/c++ is an
  # alternative, /bin is /usr/bin on a merged-/usr system).
  owner=""
  for f in "$path" "$(readlink -f "$path")"; do
    for g in "$f" "${f/#\/usr\//\/}" "/usr$f"; do
      owner=$(dpkg-query -S "$g" 2>/dev/null | head -1 | cut -d: -f1 | cut -d, -f1) && [[ -n "$owner" ]] && break 2
    done
  done
  if [[ -z "$owner" ]]; then
    echo "check-commands: $path ($cmd) belongs to no Debian package: install Debian's $package" >&2
    failed=1
    continue
  fi
  if [[ -z "${ours[$owner]:-}" ]]; then
    priority=$(dpkg-query -W -f='${Priority}' "$owner" 2>/dev/null || true)
    # A package that the expected one depends on is fine too (g++-12 for
    # build-essential's c++, python3-minimal for python3): it is installed
    # wherever that one is.
    if [[ "$priority" != required ]] &&
       ! apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts --no-breaks \
           --no-replaces --no-enhances "$package" 2>/dev/null | grep -v '^ ' | grep -qx "$owner"; then
      echo "check-commands: $cmd comes from $owner, which scripts/setup.sh does not install (expected $package)" >&2
      failed=1
    fi
  fi
done
# The files: present, and from the package named (which setup installs).
for entry in "${TROUPE_FILES[@]}"; do
  read -r path package <<< "$entry"
  if [[ -z "${ours[$package]:-}" ]]; then
    echo "check-commands: $path is said to come from $package, which scripts/needs.sh's TROUPE_PACKAGES does not list" >&2
    failed=1
  elif [[ ! -e "$path" ]]; then
    echo "check-commands: $path is missing: install Debian's $package (scripts/setup.sh does)" >&2
    failed=1
  fi
done
if ((failed)); then
  echo "check-commands: FAILED: add the missing package to TROUPE_PACKAGES in scripts/needs.sh" >&2
  exit 1
fi
echo "check-commands: all ${#TROUPE_COMMANDS[@]} commands and ${#TROUPE_FILES[@]} files present, each from a package setup.sh installs"
