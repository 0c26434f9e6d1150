#!/usr/bin/env bash
# The README's promise, tried where nothing is preinstalled: builds a
# minimal Debian 12 root (debootstrap --variant=minbase, with only git and
# ca-certificates added), clones this checkout's HEAD into it, and runs
# there, as root with CI=true, exactly what CI runs (`bash .ci/run`) and
# then the main job (`scripts/run.sh`). Prints the test summary, every test
# that skipped and why, and the main job's last lines; exits 0 only when
# both passed. Our CI machines come with python3, iproute2 and more
# preinstalled, so a green CI alone cannot show that setup.sh installs
# everything (docs/DEPENDENCIES.md). Run it before resolving an issue that
# adds a dependency, and write the date and result in docs/DEPENDENCIES.md.
#
#   sudo scripts/fresh-debian.sh            # about an hour on 2 cores
#   TROUPE_FRESH_DIR=/var/tmp/fresh         where the root goes (default: a new
#                                           folder under /var/tmp, removed at the end)
#   TROUPE_FRESH_KEEP=1                     keep the root and its logs
#   TROUPE_FRESH_SKIP_CI=1                  only the main job (a quicker look)
#
# Needs root (debootstrap, chroot, mounts) and Debian's debootstrap (installed
# here when missing). The Debian mirror and suites are the host's own apt
# sources, copied into the root: nothing else is reached.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "fresh-debian: $*"; }
die() {
  echo "fresh-debian: $*" >&2
  exit 1
}

[[ $(id -u) == 0 ]] || die "needs root (debootstrap, chroot and mounts)"
git -C "$src" rev-parse HEAD > /dev/null 2>&1 || die "$src is not a git checkout"
head=$(git -C "$src" rev-parse --short HEAD)
git -C "$src" diff --quiet HEAD || say "note: uncommitted changes in $src are not tried (the clone takes HEAD, $head)"

# The host's Debian sources: a deb822 file (Debian 12's default) or the
# one-line format, whichever names bookworm. The first URI is the mirror
# debootstrap reads; the files go into the root as they are.
sources=()
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [[ -f "$f" ]] && grep -qE '^[^#]*\bbookworm\b' "$f" && sources+=("$f")
done
((${#sources[@]})) || die "no apt source for bookworm in /etc/apt: debootstrap needs a Debian 12 mirror"
mirror=""
for f in "${sources[@]}"; do
  if [[ "$f" == *.sources ]]; then
    mirror=$(awk '/^URIs:/ { print $2; exit }' "$f")
  else
    mirror=$(awk '$1 == "deb" && $3 == "bookworm" { print ($2 ~ /^\[/ ? $3 : $2); exit }' "$f")
  fi
  [[ -n "$mirror" ]] && break
done
[[ -n "$mirror" ]] || die "could not read a mirror from ${sources[*]}"

if ! command -v debootstrap > /dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap > /dev/null ||
    { apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap > /dev/null; } ||
    die "could not install debootstrap"
fi

work=${TROUPE_FRESH_DIR:-$(mktemp -d /var/tmp/troupe-fresh.XXXXXX)}
mkdir -p "$work"
root=$work/root
logs=$work/logs
mkdir -p "$logs"
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2> /dev/null || true; done
  # Namespaces a test left behind inside the root would keep its /run busy.
  if [[ "${TROUPE_FRESH_KEEP:-0}" != 1 && -z "${TROUPE_FRESH_DIR:-}" ]]; then
    rm -rf --one-file-system "$work"
  else
    say "kept $work"
  fi
}
trap cleanup EXIT
trap 'exit 2' INT TERM

started=$SECONDS
if [[ ! -x "$root/usr/bin/git" ]]; then
  say "debootstrap --variant=minbase bookworm (the host's mirror) into $root"
  debootstrap --variant=minbase --include=git,ca-certificates bookworm "$root" "$mirror" > "$logs/debootstrap.log" 2>&1 ||
    { tail -20 "$logs/debootstrap.log"; die "debootstrap failed ($logs/debootstrap.log)"; }
fi
# The host's apt sources (updates and security too), so that the root gets
# the versions the host has.
rm -f "$root/etc/apt/sources.list"
for f in "${sources[@]}"; do cp "$f" "$root/etc/apt/sources.list.d/$(basename "$f")"; done
cp /etc/resolv.conf "$root/etc/resolv.conf" 2> /dev/null || true
# What the Debian installer (or a container runtime) writes and debootstrap
# does not: without it "localhost" does not resolve, and a test whose
# launcher names it (SLURM_JOB_NODELIST=localhost) fails.
if [[ ! -s "$root/etc/hosts" ]]; then
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$(hostname)" > "$root/etc/hosts"
fi

mount_in() {  # mount_in TYPE-OR---bind SOURCE TARGET
  mkdir -p "$root$3"
  if [[ "$1" == --bind ]]; then mount --bind "$2" "$root$3"; else mount -t "$1" "$2" "$root$3"; fi
  mounted+=("$root$3")
}
# The root must be a mount point of its own: `ip -n NS ...` makes / a
# slave mount in its mount namespace, which fails on a plain folder (a
# real system's / always is one). The tests in network namespaces skip
# without it.
mount --bind "$root" "$root"
mounted+=("$root")
mount_in proc proc /proc
mount_in sysfs sysfs /sys
mount_in --bind /dev /dev
mount_in devpts devpts /dev/pts
mount_in tmpfs tmpfs /dev/shm
mount_in tmpfs tmpfs /run  # `ip netns` keeps its namespaces under /run/netns

say "cloning $src at $head into the root"
rm -rf "$root/src"
mkdir -p "$root/src"
git clone -q --no-hardlinks "$src" "$root/src/troupe"
# CI lays shared/ beside the clone, read-only; so does this.
if [[ -d "$src/../shared" ]]; then
  cp -a "$src/../shared" "$root/src/shared"
  chmod -R a-w "$root/src/shared"
fi

in_root() {  # in_root LOG COMMAND: a clean environment, as CI's
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 CI=true TERM=dumb \
    /bin/bash -c "cd /src/troupe && $2" < /dev/null > "$logs/$1" 2>&1
}

ci_rc=0
if [[ "${TROUPE_FRESH_SKIP_CI:-0}" != 1 ]]; then
  say "bash .ci/run in the root (log: $logs/ci.log)"
  in_root ci.log "bash .ci/run" || ci_rc=$?
  say ".ci/run exited $ci_rc after $(((SECONDS - started) / 60)) min"
  echo "---- the test summary"
  grep -E 'tests passed|tests failed|Total Test time' "$logs/ci.log" | head -5 || true
  if grep -q 'The following tests FAILED' "$logs/ci.log"; then
    sed -n '/The following tests FAILED/,/^Errors while running/p' "$logs/ci.log"
  fi
  echo "---- tests that skipped, and why"
  skipped=$(grep -oE '[0-9]+/[0-9]+ Test +#[0-9]+: [^ ]+ [.]+[*]+Skipped' "$logs/ci.log" | awk '{ print $4 }' | sort -u || true)
  if [[ -z "$skipped" ]]; then
    echo "(none)"
  else
    for t in $skipped; do
      # The reason GoogleTest gave (the line after "Skipped").
      why=$(chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c \
        "cd /src/troupe/build && ctest -R '^${t//./\\.}\$' -V 2>&1" | grep -A1 -E ': Skipped$' | tail -1 | sed 's/^[0-9]*: //')
      echo "$t: ${why:-?}"
    done
  fi
  if ((ci_rc != 0)); then
    echo "---- the end of .ci/run's log"
    tail -40 "$logs/ci.log"
  fi
fi

say "scripts/run.sh in the root (log: $logs/run.log)"
run_rc=0
in_root run.log "scripts/run.sh" || run_rc=$?
echo "---- the main job's last lines"
tail -8 "$logs/run.log"
say "scripts/run.sh exited $run_rc; $(((SECONDS - started) / 60)) min in all"

if ((ci_rc != 0 || run_rc != 0)); then
  say "FAILED (.ci/run: $ci_rc, scripts/run.sh: $run_rc) at $head"
  exit 1
fi
say "passed at $head: .ci/run green and the main job ran in a fresh minimal Debian 12"
