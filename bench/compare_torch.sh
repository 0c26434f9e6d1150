#!/usr/bin/env bash
# troupe against PyTorch on the same model, data, batch, optimizer and thread
# count, in one run: prints both samples/s, the ratio, both test accuracies
# and troupe's peak memory. The anchor is ../shared/anchors/torch_anchor.py
# on Debian's python3-torch (installed here when missing).
#
#   bench/compare_torch.sh mlp 2 1      # model, epochs, threads
#   bench/compare_torch.sh cnn 1 1
#   bench/compare_torch.sh vgg 1 1
#   bench/compare_torch.sh resnet 1 1   # against torch_resnet.py, its recipe
# Both sides run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (they
# pick slower kernels where this machine sets them).
set -euo pipefail
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
model=${1:-mlp}
epochs=${2:-1}
threads=${3:-1}
if [ "$model" = resnet ]; then TROUPE_ANCHOR=${TROUPE_ANCHOR:-$(dirname "$0")/../../shared/anchors/torch_resnet.py}; fi
source "$(dirname "$0")/anchor.sh"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if [ "$model" = resnet ]; then
  # The anchor's recipe: SGD Nesterov 0.9, lr 0.1 warmed up over the first
  # epoch then cosine to 0, weight decay 5e-4 on kernels only, batch 128:
  # what `--model resnet` trains with when no flag says otherwise
  # (models/recipe.hpp).
  echo "== PyTorch: resnet, $epochs epoch(s), $threads thread(s), batch 128, SGD Nesterov, warm-up + cosine"
  OMP_NUM_THREADS=$threads /usr/bin/python3 "$anchor" train "$epochs" "$threads" --batch 128 | tee "$out/torch.txt"
  echo "== troupe: the same"
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$build/cli/troupe" train --model resnet \
    --devices cpu:0 --data fashion-mnist --epochs "$epochs" --threads "$threads" \
    --log-every 0 --summary-json "$out/troupe.json" | tee "$out/troupe.txt"
else
  echo "== PyTorch: $model, $epochs epoch(s), $threads thread(s), batch 64, Adam 1e-3"
  OMP_NUM_THREADS=$threads /usr/bin/python3 "$anchor" train "$model" "$epochs" "$threads" | tee "$out/torch.txt"
  echo "== troupe: the same"
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$build/cli/troupe" train --model "$model" \
    --devices cpu:0 --data fashion-mnist --epochs "$epochs" --batch 64 --optimizer adam --lr 1e-3 --threads "$threads" \
    --log-every 0 --summary-json "$out/troupe.json" | tee "$out/troupe.txt"
fi

torch_rate=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$out/torch.txt" | tail -1)
torch_acc=$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' "$out/torch.txt" | tail -1)
troupe_rate=$(sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' "$out/troupe.json")
troupe_acc=$(sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p' "$out/troupe.json")
troupe_mem=$(sed -n 's/.*"peak_memory_mib": \([0-9.]*\).*/\1/p' "$out/troupe.json")
ratio=$(awk -v a="$troupe_rate" -v b="$torch_rate" 'BEGIN { printf "%.2f", a / b }')
echo "RESULT compare $model epochs=$epochs threads=$threads torch_samples_per_s=$torch_rate troupe_samples_per_s=$troupe_rate ratio=$ratio torch_test_acc=$torch_acc troupe_test_acc=$troupe_acc troupe_peak_mib=$troupe_mem"
