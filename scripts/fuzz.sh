#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ and runs each for SECONDS
# (fuzz/README.md). Fails when a target finds a crash, a sanitizer report,
# a broken property, a leak, a timeout or an out-of-memory.
#
#   scripts/fuzz.sh SECONDS [TARGET...]    every target (fuzz/*.cpp) when none is named
#   scripts/fuzz.sh --seeds                rewrites fuzz/corpus/ with fuzz_make_seeds
#   scripts/fuzz.sh --list                 the targets
#
# Build: $TROUPE_ASAN_BUILD_DIR (default ./build-asan), Clang with
# AddressSanitizer + UndefinedBehaviorSanitizer and -DTROUPE_FUZZ=ON; the
# same directory serves the ASan unit tests (scripts/ci-sanitizers.sh), and
# only the fuzz targets are built here. Each target's corpus grows in
# $TROUPE_FUZZ_WORK/TARGET/corpus (default BUILD/fuzz-work), starting from the
# committed seeds in fuzz/corpus/TARGET, which are never written; crashes go
# to $TROUPE_FUZZ_WORK/TARGET/artifacts/ and the run's log to
# $TROUPE_FUZZ_WORK/TARGET.log. A summary line per target (executions,
# executions per second, corpus) ends the output and goes to
# $TROUPE_FUZZ_WORK/summary.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TROUPE_ASAN_BUILD_DIR:-$root/build-asan}
work=${TROUPE_FUZZ_WORK:-$build/fuzz-work}

all_targets() {
  for f in "$root"/fuzz/*.cpp; do
    local name
    name=$(basename "$f" .cpp)
    [ "$name" = make_seeds ] || echo "$name"
  done
}

if [ "${1:-}" = "--list" ]; then
  all_targets
  exit 0
fi
if [ $# -lt 1 ]; then
  echo "usage: scripts/fuzz.sh SECONDS [TARGET...] | --seeds | --list" >&2
  exit 2
fi

configure() {
  "$root/scripts/setup.sh"
  if ! command -v clang++ >/dev/null 2>&1; then
    echo "fuzz: clang++ not found (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
    exit 1
  fi
  local launcher=()
  if command -v ccache >/dev/null 2>&1; then
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTROUPE_CUDA=OFF \
    -DTROUPE_SANITIZE=address,undefined -DTROUPE_FUZZ=ON \
    -DTROUPE_BUILD_BENCH=OFF -DTROUPE_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
}

if [ "$1" = "--seeds" ]; then
  configure
  cmake --build "$build" --target fuzz_make_seeds
  rm -rf "$root/fuzz/corpus"
  "$build/fuzz/fuzz_make_seeds" "$root/fuzz/corpus"
  exit 0
fi

seconds=$1
shift
case "$seconds" in '' | *[!0-9]*) echo "fuzz: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(all_targets)
for t in "${targets[@]}"; do
  [ -f "$root/fuzz/$t.cpp" ] || { echo "fuzz: no target '$t' (scripts/fuzz.sh --list)" >&2; exit 2; }
done

configure
cmake --build "$build" --target $(printf 'fuzz_%s ' "${targets[@]}")

# UBSan is compiled recoverable (for the suppression file); halt_on_error
# makes every finding fatal, so that libFuzzer saves the input.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/cmake/sanitizers/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1"
mkdir -p "$work"
: > "$work/summary.txt"
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  echo "fuzz: $t for ${seconds} s (log: $work/$t.log)"
  start=$(date +%s)
  set +e
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=120 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" "${dict[@]}" \
    "$work/$t/corpus" "$root/fuzz/corpus/$t" > "$work/$t.log" 2>&1
  rc=$?
  set -e
  elapsed=$(( $(date +%s) - start ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t.log" | tail -1)
  corpus=$(find "$work/$t/corpus" -type f | wc -l)
  line="$t: ${runs:-?} executions in ${elapsed} s (${rate:-?}/s), corpus ${corpus} inputs"
  if [ $rc -ne 0 ]; then
    line="$line: FAILED (exit $rc)"
    failed+=("$t")
    echo "---- $t: the end of its log ----"
    grep -v -E '^#[0-9]+\s' "$work/$t.log" | tail -60
    ls "$work/$t/artifacts/" 2>/dev/null | sed "s|^|fuzz: artifact $work/$t/artifacts/|"
  fi
  echo "$line" | tee -a "$work/summary.txt"
done

echo "---- fuzz summary ($seconds s each) ----"
cat "$work/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
