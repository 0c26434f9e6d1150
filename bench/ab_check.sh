#!/usr/bin/env bash
# Did a change make troupe slower? Two troupe binaries, A (before) and B
# (after), run the troupe side of compare_torch.sh, compare_ddp.sh and
# elastic.sh in alternating rounds (A then B, B then A, ...), so that a
# machine's drift hits both alike; prints each figure's median over the
# rounds for A and B and B / A. The anchors (PyTorch) are not run: the
# question is troupe against itself.
#
#   bench/ab_check.sh OLD/troupe NEW/troupe [ROUNDS]     (default 5)
#
# Figures (samples/s over the training steps unless said):
#   torch-mlp   --model mlp, 2 epochs, 1 thread, batch 64, Adam (compare_torch.sh mlp 2 1)
#   torch-cnn   --model cnn, 1 epoch, the same                  (compare_torch.sh cnn 1 1)
#   ddp-*       mlp 400 steps / cnn 200, batch 64 per replica   (compare_ddp.sh): sync on 2
#               devices, 1 device, async and ssp:2 on 2 devices
#   elastic-*   elastic.sh mlp sync kill, one trial a round: detect, resume (s) and the
#               rate of epoch 1 (k samples/s)
# Both builds run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset.
set -euo pipefail
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
if [ $# -lt 2 ]; then
  echo "usage: $0 OLD_TROUPE NEW_TROUPE [ROUNDS]" >&2
  exit 2
fi
A=$(readlink -f "$1")
B=$(readlink -f "$2")
ROUNDS=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
for t in "$A" "$B"; do [ -x "$t" ] || { echo "ab_check: $t is not an executable" >&2; exit 2; }; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

rate() { sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' "$1"; }
train() {  # binary, name, arguments...
  local bin=$1 name=$2
  shift 2
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$bin" train --data fashion-mnist --batch 64 --optimizer adam --lr 1e-3 \
    --threads 1 --log-every 0 --summary-json "$out/$name.json" "$@" >"$out/$name.log" 2>&1 ||
    { echo "ab_check: $bin train $* failed:" >&2; tail -5 "$out/$name.log" >&2; exit 1; }
  rate "$out/$name.json"
}
one_round() {  # side (A or B), binary
  local side=$1 bin=$2
  echo "$side torch-mlp $(train "$bin" t1 --model mlp --devices cpu:0 --epochs 2)"
  echo "$side torch-cnn $(train "$bin" t2 --model cnn --devices cpu:0 --epochs 1)"
  local m steps
  for m in mlp cnn; do
    steps=400
    [ $m = cnn ] && steps=200
    echo "$side ddp-$m-sync2 $(train "$bin" d1 --model $m --steps $steps --devices cpu:0,cpu:1 --mode sync)"
    echo "$side ddp-$m-one $(train "$bin" d2 --model $m --steps $steps --devices cpu:0)"
    echo "$side ddp-$m-async2 $(train "$bin" d3 --model $m --steps $steps --devices cpu:0,cpu:1 --mode async)"
    echo "$side ddp-$m-ssp2 $(train "$bin" d4 --model $m --steps $steps --devices cpu:0,cpu:1 --mode ssp:2)"
  done
  TRIALS=1 "$here/elastic.sh" "$bin" mlp sync kill >"$out/elastic.log" 2>&1 ||
    { echo "ab_check: elastic.sh with $bin failed:" >&2; tail -5 "$out/elastic.log" >&2; exit 1; }
  local trial
  trial=$(grep '^trial 1:' "$out/elastic.log")
  echo "$side elastic-detect $(grep -o 'detect [0-9.]*' <<<"$trial" | awk '{print $2}')"
  echo "$side elastic-resume $(grep -o 'resume [0-9.]*' <<<"$trial" | awk '{print $2}')"
  echo "$side elastic-epoch1 $(grep -o 'epoch 1 [0-9.]*' <<<"$trial" | awk '{print $3}')"
}

echo "ab_check: A = $A"
echo "ab_check: B = $B"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order="A B"; else order="B A"; fi
  for side in $order; do
    bin=$A
    [ "$side" = B ] && bin=$B
    one_round "$side" "$bin" | tee -a "$out/figures"
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "medians over $ROUNDS round(s):"
printf '  %-18s %12s %12s %8s\n' figure A B "B/A"
for f in $(awk '{print $2}' "$out/figures" | awk '!seen[$0]++'); do
  a=$(awk -v f="$f" '$1 == "A" && $2 == f {print $3}' "$out/figures" | median)
  b=$(awk -v f="$f" '$1 == "B" && $2 == f {print $3}' "$out/figures" | median)
  printf '  %-18s %12s %12s %8s\n' "$f" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "?" }')"
done
