#!/usr/bin/env bash
# troupe's gpt against PyTorch's (../shared/anchors/torch_gpt.py: the same
# network, recipe, batch and thread count) on the King James Bible, in one
# run: for each seed both sides train STEPS steps (alternating, troupe
# first), then troupe trains the first seed twice more: on 2 devices in sync
# (the same batch per replica), and with --precision bf16. Prints tokens/s
# (training steps only), the validation loss of each, the means over the
# seeds and the ratios.
#
#   bench/compare_gpt.sh                 # 2000 steps, 1 thread, seeds 0 and 1
#   bench/compare_gpt.sh 200 1 "0"       # a quick look
#   GPT_FLAGS="--layers 6 --heads 6 --width 384 --context 256 --batch 64" \
#     bench/compare_gpt.sh 200 16 "0"    # nanoGPT's GPU shape (on many cores)
#
# The text handed to the anchor is what `troupe train --data kjv` reads:
# `bible Genesis1:1-Revelation22:21` with COLUMNS unset, its SHA-256
# checked. troupe's validation loss is the mean over every window that
# tiles the validation split; the anchor's over 50 random batches (seed
# 1234). Both sides run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset.
set -euo pipefail
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
steps=${1:-2000}
threads=${2:-1}
seeds=${3:-"0 1"}
read -r -a model_flags <<< "${GPT_FLAGS:-}"
TROUPE_ANCHOR=${TROUPE_ANCHOR:-$(dirname "$0")/../../shared/anchors/torch_gpt.py}
source "$(dirname "$0")/anchor.sh"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
env -u COLUMNS bible Genesis1:1-Revelation22:21 < /dev/null > "$out/kjv.txt"
hash=$(sha256sum "$out/kjv.txt" | cut -c1-16)
[ "$hash" = 82fa5f3788c6a9a0 ] || { echo "compare_gpt: the KJV's SHA-256 starts $hash, not 82fa5f3788c6a9a0" >&2; exit 1; }

troupe_run() {  # seed devices name [more flags]
  local seed=$1 devices=$2 name=$3
  shift 3
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$build/cli/troupe" train --model gpt --data kjv \
    --steps "$steps" --seed "$seed" --devices "$devices" --threads "$threads" "${model_flags[@]}" "$@" --log-every 0 \
    --summary-json "$out/$name.json" > "$out/$name.txt" 2>&1 || { cat "$out/$name.txt"; exit 1; }
  local rate loss
  rate=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' "$out/$name.json")
  loss=$(sed -n 's/.*"test_loss": \([0-9.]*\).*/\1/p' "$out/$name.json")
  echo "troupe seed=$seed devices=$devices $* tokens_per_s=$rate val_loss=$loss"
}

for seed in $seeds; do
  troupe_run "$seed" cpu:0 "troupe-$seed" | tee -a "$out/troupe.txt"
  OMP_NUM_THREADS=$threads /usr/bin/python3 "$anchor" train "$out/kjv.txt" "$threads" --steps "$steps" \
    --seed "$seed" "${model_flags[@]}" | grep RESULT | tee -a "$out/torch.txt"
done
first=${seeds%% *}
troupe_run "$first" cpu:0,cpu:1 "troupe-2dev" | tee "$out/two.txt"
troupe_run "$first" cpu:0 "troupe-bf16" --precision bf16 | tee "$out/bf16.txt"

mean() { awk -v key="$1" '{ for (i = 1; i <= NF; ++i) if (index($i, key "=") == 1) { s += substr($i, length(key) + 2); n++ } }
                          END { printf "%.4f", s / n }' "$2"; }
t_rate=$(mean tokens_per_s "$out/troupe.txt"); p_rate=$(mean tokens_per_s "$out/torch.txt")
t_loss=$(mean val_loss "$out/troupe.txt"); p_loss=$(mean val_loss "$out/torch.txt")
two_rate=$(mean tokens_per_s "$out/two.txt")
bf16_rate=$(mean tokens_per_s "$out/bf16.txt"); bf16_loss=$(mean val_loss "$out/bf16.txt")
one_loss=$(grep "seed=$first " "$out/troupe.txt" | head -1 | sed -n 's/.*val_loss=\([0-9.]*\).*/\1/p')
one_first=$(grep "seed=$first " "$out/troupe.txt" | head -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p')
awk -v tr="$t_rate" -v pr="$p_rate" -v tl="$t_loss" -v pl="$p_loss" -v two="$two_rate" -v one="$one_first" \
  -v bf="$bf16_rate" -v bl="$bf16_loss" -v ol="$one_loss" \
  -v steps="$steps" -v threads="$threads" -v flags="${GPT_FLAGS:-default}" 'BEGIN {
  printf "RESULT compare_gpt steps=%s threads=%s flags=\"%s\" torch_tokens_per_s=%.0f troupe_tokens_per_s=%.0f ratio=%.2f torch_val_loss=%.4f troupe_val_loss=%.4f loss_diff=%+.1f%% two_devices_tokens_per_s=%.0f two_devices_speedup=%.2f bf16_tokens_per_s=%.0f bf16_speedup=%.2f bf16_val_loss=%.4f bf16_loss_diff=%+.1f%%\n",
    steps, threads, flags, pr, tr, tr / pr, pl, tl, 100 * (tl - pl) / pl, two, two / one, bf, bf / one, bl, 100 * (bl - ol) / ol }'
