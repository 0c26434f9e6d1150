#!/usr/bin/env bash
# troupe's tcp all-reduce (bench_tcp_allreduce, W forked processes on
# loopback) against PyTorch's Gloo all-reduce (../shared/anchors/
# torch_anchor.py, 1 thread per rank) in one run, and the busbw ratios.
#
#   bench/compare_gloo.sh            # TROUPE_BUILD_DIR=... to pick the build
#
# Sizes in MB of 2^20 bytes on both sides; busbw = algbw * 2 (W - 1) / W.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_BUILD_DIR:-$root/build}
anchor=${TROUPE_ANCHOR:-$root/../shared/anchors/torch_anchor.py}
[ -f "$anchor" ] || { echo "compare_gloo.sh: anchor script not found at $anchor (set TROUPE_ANCHOR)" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null ||
  { echo "compare_gloo.sh: Debian's python3-torch is missing (apt-get install -y python3-torch)" >&2; exit 1; }
bench=$build/bench/bench_tcp_allreduce
[ -x "$bench" ] || { echo "compare_gloo.sh: build it first: ninja -C $build bench_tcp_allreduce" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
busbw() { sed -n "s/.*world=$2 size_MB=$3\(\.0\)\{0,1\} .*busbw_GBps=\([0-9.]*\).*/\2/p" "$1" | tail -1; }

echo "== troupe tcp, 2 ranks"; "$bench" --world 2 --sizes 4,64 | tee "$out/t2.txt"
echo "== troupe tcp, 3 ranks"; "$bench" --world 3 --sizes 4,64 | tee "$out/t3.txt"
echo "== Gloo"
for args in "2 4" "2 64" "3 64"; do
  OMP_NUM_THREADS=1 /usr/bin/python3 "$anchor" allreduce $args | grep RESULT | tee -a "$out/gloo.txt"
done
line="RESULT compare-gloo"
for case in "t2 2 4" "t2 2 64" "t3 3 64"; do
  set -- $case
  t=$(busbw "$out/$1.txt" "$2" "$3"); g=$(busbw "$out/gloo.txt" "$2" "$3")
  r=$(awk -v a="$t" -v b="$g" 'BEGIN { printf "%.2f", a / b }')
  line="$line w${2}_${3}MB_troupe_busbw=$t gloo_busbw=$g ratio=$r"
done
echo "$line"
