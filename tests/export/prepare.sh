#!/usr/bin/env bash
# One model of the export tests (tests/CMakeLists.txt, "The ONNX export"): trains it a
# few steps into a checkpoint, then writes what the checks compare:
#   WORK/NAME/predictions.json, inputs.npy   troupe predict, the first 100 test examples
#   WORK/NAME/model.onnx                     troupe export
# and with `full` (40 steps) also predictions_all.json, inputs_all.npy (every test
# example) and eval.txt (troupe eval), for the PyTorch check.
#
# Usage: prepare.sh TROUPE WORK NAME MODEL DATA [full]
#   MODEL: a zoo name or a spec file; DATA: as troupe train's --data
# $EXPORT_DATA_FLAGS go to train, predict and eval (how the data is read:
# --task regress --test-fraction 0.2), $EXPORT_TRAIN_FLAGS to train only
# (--standardize).
set -euo pipefail
troupe=$1 work=$2 name=$3 model=$4 data=$5 full=${6:-}
read -r -a data_flags <<< "${EXPORT_DATA_FLAGS:-}"
read -r -a train_flags <<< "${EXPORT_TRAIN_FLAGS:-}"
dir=$work/$name
rm -rf "$dir"
mkdir -p "$dir"
# Batch 32 for 5 steps: the BatchNorm layers' running statistics move off
# their start (0 and 1), so the export is checked with real ones. The
# PyTorch check's resnet trains 40 steps with SGD and momentum (about 10 s),
# so that its test accuracy (0.37 on the 500 examples, where 5 steps give
# one class everywhere) is a figure a wrong layer would change.
training=(--steps 5)
[[ $full == full ]] && training=(--steps 40 --epochs 3 --optimizer sgd --lr 0.05 --momentum 0.9)
"$troupe" train --model "$model" --data "$data" "${data_flags[@]}" "${train_flags[@]}" "${training[@]}" --batch 32 --devices cpu:0 \
  --checkpoint-dir "$dir/ckpt" --log-every 0 > "$dir/train.log" 2>&1 || {
  cat "$dir/train.log"
  exit 1
}
ck=$(ls "$dir"/ckpt/ckpt-*.troupe | tail -n 1)
"$troupe" predict --checkpoint "$ck" --data "$data" "${data_flags[@]}" --limit 100 --output "$dir/predictions.json" \
  --inputs "$dir/inputs.npy"
"$troupe" export --checkpoint "$ck" --format onnx --output "$dir/model.onnx"
if [[ $full == full ]]; then
  "$troupe" predict --checkpoint "$ck" --data "$data" "${data_flags[@]}" --output "$dir/predictions_all.json" \
    --inputs "$dir/inputs_all.npy"
  "$troupe" eval --checkpoint "$ck" --data "$data" "${data_flags[@]}" | tee "$dir/eval.txt"
fi
