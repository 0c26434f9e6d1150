#!/usr/bin/env bash
# Builds CAF 0.17.6 with ThreadSanitizer into a prefix, for the TSan run of
# the actor tests (scripts/ci-sanitizers.sh, docs/SANITIZERS.md).
#
# Why: Debian's libcaf is built without TSan, so TSan cannot see the
# happens-before that CAF's lock-free mailboxes give a message, and reports
# every tensor handed from one actor to another as a race. Built from the
# same source with -fsanitize=thread, CAF's atomics are visible and only
# real races are left.
#
# The source is Debian's: the upstream tarball of the `actor-framework`
# source package (the one libcaf-dev is built from), fetched by apt from a
# private deb-src list (the machine's own apt configuration is not
# touched), which checks it against the SHA-256 of Debian's signed Sources
# index. Debian's packaging patches are not applied; the one a GCC 12
# build needs (a missing #include <limits> in libcaf_io) is given with
# -include. Only libcaf_core and libcaf_io are built, static, with the
# same compiler and TSan flags as troupe's sanitizer build.
#
#   scripts/build-caf-tsan.sh [PREFIX]      (default: ./build-caf-tsan/install)
#
# A prefix that holds a finished build of the same recipe is kept (a second
# call takes no time). Needs root for `apt-get update` into the private
# list directory, as scripts/setup.sh does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mkdir -p "${1:-$root/build-caf-tsan/install}" && cd "${1:-$root/build-caf-tsan/install}" && pwd)
work=$(dirname "$prefix")/work
version=0.17.6
cxx=${CXX:-g++}
flags="-fsanitize=thread -fno-omit-frame-pointer -g1 -include limits"
recipe="caf $version; $($cxx --version | head -1); $flags"
stamp=$prefix/.troupe-recipe

if [[ -f $stamp && $(cat "$stamp") == "$recipe" && -f $prefix/lib/libcaf_core_static.a ]]; then
  echo "build-caf-tsan: $prefix already holds $recipe"
  exit 0
fi

die() { echo "build-caf-tsan: $*" >&2; exit 1; }
command -v apt-get >/dev/null || die "needs apt-get (Debian) to fetch the actor-framework source package"

rm -rf "$work"
mkdir -p "$work/apt/sources.list.d" "$work/apt/lists/partial"
# A deb-src twin of every Debian source the machine has.
found=0
for f in /etc/apt/sources.list.d/*.sources; do
  [[ -f $f ]] || continue
  sed 's/^Types: deb$/Types: deb deb-src/' "$f" > "$work/apt/sources.list.d/$(basename "$f")"
  found=1
done
if [[ -f /etc/apt/sources.list ]] && grep -q '^deb ' /etc/apt/sources.list; then
  sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > "$work/apt/sources.list.d/from-sources-list.list"
  found=1
fi
((found)) || die "no apt sources found in /etc/apt"
apt_opts=(-o "Dir::Etc::sourceparts=$work/apt/sources.list.d" -o Dir::Etc::sourcelist=/dev/null
          -o "Dir::State::Lists=$work/apt/lists" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >"$work/apt-update.log" 2>&1 || { tail -5 "$work/apt-update.log" >&2; die "apt-get update of the deb-src list failed"; }

# The upstream tarball only (Debian's packaging is not needed; apt checks
# the tarball against the SHA-256 of the signed Sources index).
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only --tar-only "actor-framework=$version-2.1" \
   >"$work/apt-source.log" 2>&1) ||
  { tail -5 "$work/apt-source.log" >&2; die "could not fetch the source of Debian's actor-framework $version-2.1 (libcaf-dev)"; }
name=actor-framework_${version}.orig.tar.gz
[[ -f $work/$name ]] || die "apt fetched no $name into $work"

tar -xf "$work/$name" -C "$work"
src=$work/actor-framework-$version
[[ -f $src/CMakeLists.txt ]] || die "$name did not unpack to $src"

cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCAF_BUILD_STATIC_ONLY=yes -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_TOOLS=yes \
  -DCAF_NO_OPENCL=yes -DCAF_NO_OPENSSL=yes -DCAF_NO_PYTHON=yes -DCAF_NO_SUMMARY=yes >"$work/configure.log" 2>&1 ||
  { tail -20 "$work/configure.log" >&2; die "configuring CAF failed"; }
cmake --build "$work/build" -j "$(nproc 2>/dev/null || echo 2)" >"$work/build.log" 2>&1 ||
  { grep -m 5 -A 3 'error' "$work/build.log" >&2; die "building CAF failed (log: $work/build.log)"; }
cmake --install "$work/build" >"$work/install.log" 2>&1 || die "installing CAF into $prefix failed"
echo "$recipe" > "$stamp"
rm -rf "$work"
echo "build-caf-tsan: $recipe -> $prefix"
