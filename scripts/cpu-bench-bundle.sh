#!/usr/bin/env bash
# Builds, on this machine, what carries troupe's CPU benchmarks to a lent
# device machine, whose idle cores are where the goals of the sealed ring
# and of the ps tasks can be measured; that machine has none of our Debian
# packages (docs/BENCHMARKS.md, "On idle cores"):
#
#   OUT/bundle.tar.xz   cli/troupe and bench/{bench_tcp_allreduce,
#                       bench_sealed_frame,bench_ps_push} of a CPU-only
#                       Release build, lib/ (every shared library they need
#                       but glibc's: CAF, OpenBLAS, oneDNN, OpenSSL, ...) and
#                       data/fashion-mnist/ (Debian's four .gz files)
#   OUT/run.sh          unpacks the bundle once into /tmp and runs a command
#                       with it: TROUPE_BUILD_DIR, LD_LIBRARY_PATH and
#                       TROUPE_FASHION_MNIST_DIR set
#
# Usage: scripts/cpu-bench-bundle.sh [OUT]     (default: build-dev; replaced)
# Then, with the device tool: command "build-dev/run.sh bench/idle_cores.sh",
# carry ["build-dev"]. The build goes to $TROUPE_CPU_BUILD_DIR (default
# build-cpu; configured here if it is not: CUDA off, no tests or examples).
# Fails when OUT is over 60 MiB (a device run carries 64 MiB in all) or when
# a bundled binary needs a library that is neither bundled nor glibc's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_CPU_BUILD_DIR:-$root/build-cpu}
out=${1:-$root/build-dev}
limit_mib=60
data_dir=${TROUPE_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
say() { echo "cpu-bench-bundle: $*"; }
fail() { echo "cpu-bench-bundle: $*" >&2; exit 1; }

if [[ ! -f $build/CMakeCache.txt ]]; then
  say "configuring $build (Release, CUDA off, no tests or examples)"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=OFF \
    -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_EXAMPLES=OFF > /dev/null
fi
targets=(troupe bench_tcp_allreduce bench_sealed_frame bench_ps_push)
cmake --build "$build" --target "${targets[@]}" -j "$(nproc 2>/dev/null || echo 2)" > /dev/null \
  || fail "building ${targets[*]} in $build failed"

stage=$(mktemp -d "${TMPDIR:-/tmp}/troupe-cpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/cli" "$stage/bench" "$stage/data/fashion-mnist"
cp "$build/cli/troupe" "$stage/cli/"
for b in bench_tcp_allreduce bench_sealed_frame bench_ps_push; do cp "$build/bench/$b" "$stage/bench/"; done
binaries=("$stage/cli/troupe" "$stage"/bench/*)
strip --strip-unneeded "${binaries[@]}"
source "$root/scripts/bundle-libs.sh"
bundle_libraries "$stage/lib" "${binaries[@]}"
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true
bundle_unresolved "$stage/lib" "${binaries[@]}" || fail "some libraries would be missing on a bare machine (above)"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ -f $data_dir/$f.gz ]]; then cp "$data_dir/$f.gz" "$stage/data/fashion-mnist/"
  elif [[ -f $data_dir/$f ]]; then gzip -c "$data_dir/$f" > "$stage/data/fashion-mnist/$f.gz"
  else fail "Fashion-MNIST file $f[.gz] not found in $data_dir (apt-get install dataset-fashion-mnist)"
  fi
done
{
  echo "troupe CPU benchmark bundle"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "troupe: $("$build/cli/troupe" --version 2>/dev/null | tr '\n' ';')"
} > "$stage/MANIFEST"

rm -rf "$out"
mkdir -p "$out"
say "packing (xz; about a minute)"
tar -C "$stage" -cf - . | xz -6 -T0 > "$out/bundle.tar.xz"
cp "$root/scripts/cpu-bench-run.sh" "$out/run.sh"
chmod +x "$out/run.sh"
bytes=$(du -sb "$out" | cut -f1)
say "$out: $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB ($(sed -n 3p "$stage/MANIFEST"))"
[[ $bytes -le $((limit_mib * 1048576)) ]] || fail "the bundle is over the $limit_mib MiB a device run can carry"
