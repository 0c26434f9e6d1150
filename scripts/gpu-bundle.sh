#!/usr/bin/env bash
# Builds, on this machine (CUDA toolkit, no GPU needed), the folder that
# travels to a bare GPU machine (docs/GPU-TESTING.md):
#
#   bin/troupe             the command line, ref + cuda backends only
#                          (troupe-cuda-only: no OpenBLAS or oneDNN to carry)
#   bin/kernels_gpu_tests  every kernel on cuda against ref
#   bin/gpu_tests          nccl, local on one GPU, device actors on cuda:0,
#                          two troupe nodes through one NCCL group (2 GPUs)
#   lib/                   the shared libraries those need that a bare GPU
#                          machine lacks (CAF, Cap'n Proto, OpenSSL's
#                          libcrypto, zlib; lib/fallback: libstdc++ and
#                          libgcc_s); never glibc, CUDA, cuDNN or NCCL,
#                          which gpu-check.sh finds there
#   data/fashion-mnist/    the four IDX files, xz-compressed (gpu-check.sh unpacks them)
#   data/kjv.txt.xz        the KJV as `troupe train --data kjv` reads it (no bible-kjv there)
#   gpu-check.sh, torch_gpu_anchor.py, torch_gpt.py (../shared/anchors), MANIFEST
#
# Usage: scripts/gpu-bundle.sh [OUT]   (default: build/gpu-bundle; replaced)
# Builds the three targets in $TROUPE_BUILD_DIR (default build/), which must
# be configured with the CUDA backend (scripts/build.sh does that where the
# toolkit is). Fails when the folder exceeds 48 MiB, or when a bundled
# binary needs a library that is neither bundled, nor glibc's, nor CUDA's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}
out=${1:-$build/gpu-bundle}
limit_mib=48
data_dir=${TROUPE_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

say() { echo "gpu-bundle: $*"; }
fail() { echo "gpu-bundle: $*" >&2; exit 1; }

[[ -f $build/CMakeCache.txt ]] || fail "$build is not configured; run scripts/build.sh first"
cmake --build "$build" --target troupe_cuda_only kernels_gpu_tests gpu_tests -j "$(nproc 2>/dev/null || echo 2)" \
  || fail "building the GPU targets failed (is $build configured with the CUDA backend? troupe --version says)"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data/fashion-mnist"
cp "$build/cli/troupe-cuda-only" "$out/bin/troupe"
cp "$build/tests/kernels_gpu_tests" "$build/tests/gpu_tests" "$out/bin/"
strip --strip-unneeded "$out"/bin/*
cp "$root/scripts/gpu-check.sh" "$root/scripts/torch_gpu_anchor.py" "$out/"
gpt_anchor=${TROUPE_GPT_ANCHOR:-$root/../shared/anchors/torch_gpt.py}
[[ -f $gpt_anchor ]] || fail "the gpt's anchor $gpt_anchor is missing (set TROUPE_GPT_ANCHOR)"
cp "$gpt_anchor" "$out/torch_gpt.py"

# Libraries: everything ldd resolves but glibc's, CUDA's, cuDNN's and
# NCCL's (scripts/bundle-libs.sh; the GPU machine has those: gpu-check.sh
# finds them).
source "$root/scripts/bundle-libs.sh"
bundle_libraries "$out/lib" "$out"/bin/*
# Debian 12's libstdc++ and libgcc_s need glibc 2.36 and 2.35, newer than
# some GPU machines have (Ubuntu 22.04: 2.35), where the system's own
# libstdc++ (GCC 12's, GLIBCXX_3.4.30) serves: they go to lib/fallback/,
# which gpu-check.sh adds only when the binaries do not start without it.
mkdir -p "$out/lib/fallback"
for f in "$out"/lib/libstdc++.so.* "$out"/lib/libgcc_s.so.*; do
  [[ -e $f ]] && mv "$f" "$out/lib/fallback/"
done
strip --strip-unneeded "$out"/lib/*.so* "$out"/lib/fallback/* 2>/dev/null || true

# The data as xz (4 MB less than Debian's gzip, which the 48 MiB need);
# gpu-check.sh unpacks it. Compressed once, kept in $build/gpu-bundle-data.
cache="$build/gpu-bundle-data"
mkdir -p "$cache"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ -f $data_dir/$f.gz ]]; then src=$data_dir/$f.gz; read_src() { gzip -dc "$src"; }
  elif [[ -f $data_dir/$f ]]; then src=$data_dir/$f; read_src() { cat "$src"; }
  else fail "Fashion-MNIST file $f[.gz] not found in $data_dir (apt-get install dataset-fashion-mnist, or set TROUPE_FASHION_MNIST_DIR)"
  fi
  if [[ ! -s $cache/$f.xz || $cache/$f.xz -ot $src ]]; then
    say "compressing $f (once; about a minute for the training images)"
    read_src | xz -9 -T0 -c > "$cache/$f.xz.tmp" && mv "$cache/$f.xz.tmp" "$cache/$f.xz"
  fi
  cp "$cache/$f.xz" "$out/data/fashion-mnist/"
done

# The gpt's text: what `--data kjv` reads, its SHA-256 checked here and
# there (gpu-check.sh hands the same file to troupe and torch_gpt.py).
env -u COLUMNS bible Genesis1:1-Revelation22:21 < /dev/null > "$cache/kjv.txt" \
  || fail "'bible' failed: apt-get install bible-kjv (scripts/setup.sh does)"
[[ $(sha256sum "$cache/kjv.txt" | cut -c1-16) == 82fa5f3788c6a9a0 ]] || fail "the KJV's SHA-256 is not 82fa5f3788c6a9a0..."
xz -9 -T0 -c "$cache/kjv.txt" > "$out/data/kjv.txt.xz"

# The check: with only the bundle on the library path, every library a
# bundled binary needs resolves into lib/, to glibc, or is a CUDA one.
bundle_unresolved "$out/lib:$out/lib/fallback" "$out"/bin/* || fail "some libraries would be missing on a bare GPU machine (above)"

# What the binaries ask of the GPU machine's own libraries.
newest() { local prefix=$1; shift; for f in "$@"; do objdump -T "$f" 2>/dev/null; done | grep -o "${prefix}_[0-9.]*" | sort -Vu | tail -1; }
glibc=$(newest GLIBC "$out"/bin/* "$out"/lib/*.so*)
glibc_fallback=$(newest GLIBC "$out"/lib/fallback/*)
glibcxx=$(newest GLIBCXX "$out"/bin/* "$out"/lib/*.so*)
cuda_libs=$(for f in "$out"/bin/*; do ldd "$f"; done | awk '{print $1}' | while read -r n; do bundle_is_cuda "$n" && echo "$n"; done | sort -u | tr '\n' ' ')
bytes=$(du -sb "$out" | cut -f1)
{
  echo "troupe GPU bundle"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "bin/troupe: $("$build/cli/troupe-cuda-only" --version 2>/dev/null | tr '\n' ';')"
  echo "needs from the GPU machine: glibc >= ${glibc#GLIBC_}, a libstdc++ with ${glibcxx} (else lib/fallback's, which needs glibc >= ${glibc_fallback#GLIBC_}), an NVIDIA driver for CUDA 13, and: $cuda_libs(libcudnn.so.9 may come from PyTorch's wheel; libnccl.so.2 is loaded at run time)"
  echo "size: $bytes bytes"
  echo "files:"
  (cd "$out" && find . -type f -printf '  %p %s\n' | sort)
} > "$out/MANIFEST"

mib=$(( (bytes + 1048575) / 1048576 ))
say "$out: $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB ($bytes bytes) in $(find "$out" -type f | wc -l) files"
(cd "$out" && du -sh bin lib data | sed 's/^/  /')
[[ $bytes -le $((limit_mib * 1048576)) ]] || fail "the bundle is $mib MiB, over the $limit_mib MiB limit"
say "ldd with LD_LIBRARY_PATH=lib resolves everything but: $cuda_libs"
say "needs glibc >= ${glibc#GLIBC_} and a libstdc++ with $glibcxx on the GPU machine (lib/fallback has one that needs glibc >= ${glibc_fallback#GLIBC_})"
say "copy the folder to the GPU machine and run ./gpu-check.sh there"
