#!/usr/bin/env bash
# The GPU check: run on a GPU machine from the folder scripts/gpu-bundle.sh
# made (docs/GPU-TESTING.md). In order:
#
#   1. the GPU (nvidia-smi -L) and the libraries the bundle does not carry:
#      CUDA runtime and cuBLAS (the toolkit), cuDNN 9 and NCCL 2 (the
#      toolkit, the system, or PyTorch's wheels: found through python3)
#   2. every GPU test: kernels_gpu_tests, then each test of gpu_tests in a
#      process of its own (a GPU fault in one cannot take the others down)
#   3. troupe train --model cnn for one epoch on cuda:0, batch 64 and 512,
#      alternating with
#   4. the same cnn in PyTorch on the same GPU (torch_gpu_anchor.py), batch
#      64 and 512, for GPU_CHECK_ROUNDS rounds (default 3); then two logical
#      replicas on cuda:0 (cuda:0,cuda:0), sync and async
#   5. a table of the median samples/s and test accuracy, troupe against
#      PyTorch
#
# Everything goes to the terminal and to results/ (gpu-check.log, one log
# per run, the summaries). Exit status: 0 everything passed, 1 something
# failed (listed at the end), 3 no GPU here (nothing was checked).
#
# Environment: GPU_CHECK_RESULTS (default ./results), GPU_CHECK_ROUNDS (default 3), GPU_CHECK_QUICK=1
# (tests only, no training runs), CUDA_HOME, TROUPE_NCCL_LIBRARY (found
# otherwise), PYTHON (default python3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
results=${GPU_CHECK_RESULTS:-$here/results}
python=${PYTHON:-python3}
mkdir -p "$results"
exec > >(tee "$results/gpu-check.log") 2>&1

failures=()
note_failure() { failures+=("$1"); echo "FAILED: $1"; }
section() { printf '\n==== %s ====\n' "$*"; }

section "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
[[ -f $here/MANIFEST ]] && sed -n '1,5p' "$here/MANIFEST"

# ---- 1. the GPU -----------------------------------------------------------
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)
fi
if [[ -z $gpus ]] && command -v "$python" >/dev/null 2>&1; then
  n=$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  [[ ${n:-0} -gt 0 ]] && gpus="$n GPU(s) seen by PyTorch (no nvidia-smi)"
fi
if [[ -z $gpus ]]; then
  echo "gpu-check: no GPU on this machine (nvidia-smi lists none$(command -v nvidia-smi >/dev/null 2>&1 || echo ': not installed'));"
  echo "gpu-check: nothing was checked. Run this on a GPU machine (docs/GPU-TESTING.md)."
  exit 3
fi
echo "$gpus"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true

# ---- 1b. the libraries the bundle leaves to this machine ------------------
site_dirs=$("$python" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null || true)
search_dirs=()
for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13*; do
  [[ -n $d && -d $d ]] && search_dirs+=("$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib")
done
while read -r sp; do
  [[ -n $sp && -d $sp ]] || continue
  for d in "$sp"/nvidia/*/lib "$sp"/torch/lib; do [[ -d $d ]] && search_dirs+=("$d"); done
done <<<"$site_dirs"
search_dirs+=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib)

# find_lib NAME: the first folder holding NAME, else ldconfig's answer.
find_lib() {
  local d
  for d in "${search_dirs[@]}"; do
    [[ -e $d/$1 ]] && { echo "$d/$1"; return 0; }
  done
  ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }'
}

libpath="$here/lib"
for name in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  found=$(find_lib "$name")
  if [[ -z $found ]]; then
    echo "library $name: NOT FOUND (searched ${search_dirs[*]})"
    [[ $name == libnccl.so.2 ]] || note_failure "library $name not found"
    continue
  fi
  echo "library $name: $found"
  dir=$(dirname "$found")
  [[ :$libpath: == *:$dir:* ]] || libpath="$libpath:$dir"
  [[ $name == libnccl.so.2 ]] && export TROUPE_NCCL_LIBRARY=${TROUPE_NCCL_LIBRARY:-$found}
done
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The bundle's libstdc++ and libgcc_s (lib/fallback, Debian 12's: they need
# glibc 2.36) only when this machine's own are too old for the binaries.
if ! "$here/bin/troupe" --version >/dev/null 2>"$results/troupe-version.err" &&
   grep -qE 'GLIBCXX|CXXABI|libstdc\+\+|libgcc_s' "$results/troupe-version.err"; then
  echo "this machine's libstdc++ is too old for the bundle: using lib/fallback"
  export LD_LIBRARY_PATH="$here/lib/fallback:$LD_LIBRARY_PATH"
fi
# The data travels xz-compressed; troupe and PyTorch read the raw IDX files.
export TROUPE_FASHION_MNIST_DIR="$results/data/fashion-mnist"
mkdir -p "$TROUPE_FASHION_MNIST_DIR"
for packed in "$here"/data/fashion-mnist/*.xz; do
  raw="$TROUPE_FASHION_MNIST_DIR/$(basename "$packed" .xz)"
  [[ -s $raw ]] && continue
  if command -v xz >/dev/null 2>&1; then xz -dc "$packed" > "$raw"
  else "$python" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$packed" "$raw"
  fi || note_failure "unpacking $packed"
done
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for b in "$here"/bin/*; do
  missing=$(ldd "$b" 2>&1 | grep 'not found' || true)
  [[ -z $missing ]] || note_failure "$(basename "$b") cannot load: $(echo "$missing" | tr -s ' \t\n' ' ')"
done
"$here/bin/troupe" --version || note_failure "troupe --version"

# ---- 2. the GPU tests -----------------------------------------------------
section "kernels_gpu_tests"
if ! timeout 900 "$here/bin/kernels_gpu_tests" --gtest_brief=1 > "$results/kernels_gpu_tests.log" 2>&1; then
  note_failure "kernels_gpu_tests (results/kernels_gpu_tests.log)"
fi
head -3 "$results/kernels_gpu_tests.log"; tail -4 "$results/kernels_gpu_tests.log"

section "gpu_tests, one process per test"
"$here/bin/gpu_tests" --gtest_list_tests > "$results/gpu_tests.list" 2>&1 || note_failure "gpu_tests --gtest_list_tests"
tests=$(awk '/^[^ ]/ && /\.$/ { suite = $1 } /^  [^ ]/ { print suite $1 }' "$results/gpu_tests.list")
passed=0 skipped=0 failed=0
for t in $tests; do
  log="$results/gpu_tests.$t.log"
  if timeout 600 "$here/bin/gpu_tests" --gtest_filter="$t" > "$log" 2>&1; then
    if grep -q '^\[  SKIPPED \] 1 test' "$log"; then
      skipped=$((skipped + 1)); printf '  SKIPPED %s: %s\n' "$t" "$(grep -m1 -A1 'Skipped' "$log" | tail -1)"
    else
      passed=$((passed + 1)); printf '  passed  %s\n' "$t"
    fi
  else
    failed=$((failed + 1)); note_failure "gpu_tests $t (results/gpu_tests.$t.log)"
    grep -E 'Failure|error|Expected|Which is|actual' "$log" | head -6 | sed 's/^/      /'
  fi
  grep -h '^\[ info \]' "$log" | sed 's/^/      /'
done
echo "gpu_tests: $passed passed, $skipped skipped, $failed failed"
# A GPU that the binaries cannot see (driver, CUDA version) makes every
# test skip: that is no pass.
if grep -q 'CUDA devices: 0' "$results/kernels_gpu_tests.log" || [[ $passed == 0 ]]; then
  note_failure "the tests saw no GPU although this machine has one (driver too old for CUDA 13? see the logs)"
fi

if [[ ${GPU_CHECK_QUICK:-0} == 1 ]]; then
  section "GPU_CHECK_QUICK=1: no training runs"
else
  # ---- 3. and 4. troupe and PyTorch, alternating -----------------------------
  # GPU_CHECK_ROUNDS rounds (default 3) of troupe then PyTorch at batch 64 and
  # 512, so that a GPU whose clocks are still low after an idle spell (the
  # first run on a fresh machine) or a busy moment hits both alike; the
  # table gives the medians. Each run's figures are in results/.
  rounds=${GPU_CHECK_ROUNDS:-3}
  declare -A speed accuracy
  # record NAME SPEED ACCURACY: appends one run's figures.
  record() { speed[$1]="${speed[$1]:-} $2"; accuracy[$1]="${accuracy[$1]:-} $3"; }
  # run_troupe NAME ARGS...: one epoch of the cnn; figures from --summary-json.
  run_troupe() {
    local name=$1 log=$results/$1.r${round:-1}; shift
    section "troupe $name (round ${round:-1}): troupe train --model cnn --epochs 1 $*"
    if timeout 1200 "$here/bin/troupe" train --model cnn --data fashion-mnist --epochs 1 --log-every 0 \
         --summary-json "$log.json" "$@" > "$log.log" 2>&1; then
      local sps acc
      sps=$("$python" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["samples_per_s"]))' "$log.json" 2>/dev/null || echo "?")
      acc=$("$python" -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["test_accuracy"])' "$log.json" 2>/dev/null || echo "?")
      record "$name" "$sps" "$acc"
      grep -E '^(devices|collective)' "$log.log" | sed 's/^/  /'
      echo "  samples/s $sps, test accuracy $acc"
    else
      note_failure "troupe $name round ${round:-1} ($log.log)"
      tail -5 "$log.log" | sed 's/^/  /'
    fi
  }
  # run_torch NAME BATCH: the same cnn in PyTorch (torch_gpu_anchor.py).
  run_torch() {
    local name=$1 batch=$2 log=$results/$1.r${round:-1}.log
    section "PyTorch $name (round ${round:-1}): torch_gpu_anchor.py cnn 1 epoch, batch $batch"
    if timeout 1200 "$python" "$here/torch_gpu_anchor.py" "$TROUPE_FASHION_MNIST_DIR" cnn 1 "$batch" > "$log" 2>&1; then
      local line; line=$(grep '^RESULT' "$log")
      echo "  $line"
      record "$name" "$(sed -n 's/.*samples_per_s=\([0-9]*\).*/\1/p' <<<"$line")" \
             "$(sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p' <<<"$line")"
    else
      note_failure "PyTorch $name round ${round:-1} ($log)"
      tail -5 "$log" | sed 's/^/  /'
    fi
  }
  for ((round = 1; round <= rounds; ++round)); do
    run_troupe cnn-b64 --devices cuda:0 --batch 64
    run_torch torch-b64 64
    run_troupe cnn-b512 --devices cuda:0 --batch 512
    run_torch torch-b512 512
  done
  round=1
  run_troupe cnn-2logical-sync --devices cuda:0,cuda:0 --mode sync --batch 32
  run_troupe cnn-2logical-async --devices cuda:0,cuda:0 --mode async --batch 64

  # ---- 5. the table ---------------------------------------------------------
  # median WORDS...: the median of the numbers among them ("-" if none).
  median() { tr ' ' '\n' <<<"$*" | grep -E '^[0-9.]+$' | sort -g |
             awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  section "cnn, one epoch of Fashion-MNIST on $(head -1 <<<"$gpus"): medians of $rounds round(s)"
  printf '%-22s %12s %10s   %s\n' run samples/s test_acc "samples/s of each round"
  declare -A med_speed med_acc
  for name in cnn-b64 torch-b64 cnn-b512 torch-b512 cnn-2logical-sync cnn-2logical-async; do
    med_speed[$name]=$(median ${speed[$name]:-})
    med_acc[$name]=$(median ${accuracy[$name]:-})
    printf '%-22s %12s %10s  %s\n' "$name" "${med_speed[$name]}" "${med_acc[$name]}" "${speed[$name]:-}"
  done
  for b in 64 512; do
    t=${med_speed[cnn-b$b]} p=${med_speed[torch-b$b]}
    if [[ $t =~ ^[0-9.]+$ && $p =~ ^[0-9.]+$ ]]; then
      awk -v t="$t" -v p="$p" -v ta="${med_acc[cnn-b$b]}" -v pa="${med_acc[torch-b$b]}" -v b="$b" \
        'BEGIN { printf "batch %s: troupe / PyTorch = %.2fx samples/s (goal >= 1); accuracy %+.2f points (goal within 0.5)\n", b, t / p, (ta - pa) * 100 }'
    fi
  done
fi

# ---- 6. the gpt at nanoGPT's GPU shape, troupe and PyTorch ------------------
# --layers 6 --heads 6 --width 384 --context 256 --batch 64 on the KJV, 200
# steps each: troupe in fp32, bf16 and fp16 (with its loss scale), PyTorch
# in fp32 (the anchor has no autocast); tokens/s over the training steps,
# the validation loss. GPU_CHECK_GPT_STEPS=5000 makes it nanoGPT's whole run
# (about 10 minutes each on an H100); GPU_CHECK_GPT_PRECISIONS="fp32" runs
# troupe's fp32 only.
if [[ ${GPU_CHECK_QUICK:-0} != 1 && -f $here/data/kjv.txt.xz ]]; then
  kjv=$results/kjv.txt
  xz -dc "$here/data/kjv.txt.xz" > "$kjv" || note_failure "unpacking data/kjv.txt.xz"
  gpt_steps=${GPU_CHECK_GPT_STEPS:-200}
  gpt_flags=(--layers 6 --heads 6 --width 384 --context 256 --batch 64 --steps "$gpt_steps")
  troupe_gpt="-"
  for precision in ${GPU_CHECK_GPT_PRECISIONS:-fp32 bf16 fp16}; do
    section "troupe gpt: troupe train --model gpt --data text:kjv.txt ${gpt_flags[*]} --devices cuda:0 --precision $precision"
    if timeout 1800 "$here/bin/troupe" train --model gpt --data "text:$kjv" "${gpt_flags[@]}" --devices cuda:0 \
         --precision "$precision" --log-every 0 --summary-json "$results/gpt-$precision.json" \
         > "$results/gpt-$precision.log" 2>&1; then
      figures=$("$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["tokens_per_s"]), "%.4f" % d["test_loss"], d.get("skipped_steps"))' "$results/gpt-$precision.json")
      echo "  tokens/s, validation loss, steps skipped by the loss scale: $figures"
      [[ $precision == fp32 ]] && troupe_gpt=$figures
      [[ $precision == bf16 ]] && troupe_gpt_bf16=$figures
      [[ $precision == fp16 ]] && troupe_gpt_fp16=$figures
    else
      note_failure "troupe gpt $precision ($results/gpt-$precision.log)"; tail -5 "$results/gpt-$precision.log" | sed 's/^/  /'
    fi
  done
  section "PyTorch gpt: torch_gpt.py train kjv.txt 1 ${gpt_flags[*]} --device cuda"
  if timeout 1800 "$python" "$here/torch_gpt.py" train "$kjv" 1 "${gpt_flags[@]}" --device cuda > "$results/torch_gpt.log" 2>&1; then
    line=$(grep '^RESULT' "$results/torch_gpt.log"); echo "  $line"
    torch_tps=$(sed -n 's/.*tokens_per_s=\([0-9]*\).*/\1/p' <<<"$line")
    t_tps=${troupe_gpt%% *}
    [[ $t_tps =~ ^[0-9]+$ && $torch_tps =~ ^[0-9]+$ ]] &&
      awk -v t="$t_tps" -v p="$torch_tps" 'BEGIN { printf "gpt fp32: troupe / PyTorch = %.2fx tokens/s (goal >= 1)\n", t / p }'
    for mixed in "bf16 ${troupe_gpt_bf16:-}" "fp16 ${troupe_gpt_fp16:-}"; do
      read -r name tps _ <<<"$mixed"
      [[ ${tps:-} =~ ^[0-9]+$ && $torch_tps =~ ^[0-9]+$ ]] &&
        awk -v n="$name" -v t="$tps" -v p="$torch_tps" 'BEGIN { printf "gpt %s: troupe / PyTorch fp32 = %.2fx tokens/s (goal >= 1)\n", n, t / p }'
    done
  else
    note_failure "PyTorch gpt ($results/torch_gpt.log)"; tail -5 "$results/torch_gpt.log" | sed 's/^/  /'
  fi
fi

section "summary"
if [[ ${#failures[@]} -eq 0 ]]; then
  echo "gpu-check: everything passed (results in $results)"
  exit 0
fi
echo "gpu-check: ${#failures[@]} failure(s):"
printf '  %s\n' "${failures[@]}"
exit 1
