#!/usr/bin/env bash
# The sanitizer part of CI (.ci/run runs it after scripts/test.sh;
# docs/SANITIZERS.md says what and why, with each step's time):
#   1. AddressSanitizer + UndefinedBehaviorSanitizer (Clang): build the unit
#      test suites below and the fuzz targets in one directory, and run the
#      tests;
#   2. every fuzz target for TROUPE_CI_FUZZ_SECONDS (default 20) each
#      (scripts/fuzz.sh, same build directory);
#   3. ThreadSanitizer (GCC): build and run the collective tests (local and
#      tcp backends).
# Benchmarks and examples are not built. Each build has a directory of its
# own: $TROUPE_ASAN_BUILD_DIR (./build-asan) and $TROUPE_TSAN_BUILD_DIR
# (./build-tsan). Any sanitizer report fails its test (UBSan through
# halt_on_error, ASan and LeakSanitizer by default, TSan with exit status
# 66); suppressions, for third-party code only, are in cmake/sanitizers/.
#
#   scripts/ci-sanitizers.sh [asan] [fuzz] [tsan]     (all three when none is named)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
asan_build=${TROUPE_ASAN_BUILD_DIR:-$root/build-asan}
tsan_build=${TROUPE_TSAN_BUILD_DIR:-$root/build-tsan}
fuzz_seconds=${TROUPE_CI_FUZZ_SECONDS:-20}
jobs=$(nproc 2>/dev/null || echo 2)

# The unit test executables run under ASan + UBSan: every suite labelled
# unit, and tcp_tests (labelled multiproc: forked ranks), whose bad-frame
# tests are the data plane's reader. Left out: kernels_tests (the kernels'
# arithmetic, minutes under ASan; the fuzzers do not reach it either),
# cli_tests, api_tests and examples_tests, which train real models through
# the troupe binary or the API for several minutes each under ASan
# (docs/SANITIZERS.md, "What runs").
asan_suites="util_tests;models_tests;collective_tests;transport_tests;control_tests;cluster_tests;tcp_tests;ps_link_tests;actors_tests"
# ThreadSanitizer: troupe's own threads: the collective backends (the local
# backend's ranks as threads, the tcp backend's sender and receiver threads),
# the gate and the join relay (a thread per connection, the sealed splice,
# the man-in-the-middle proxies) and the parameter server's push link (a
# reader and a writer thread per connection, pushes applied to the shards'
# cores from them, stop() and abort() from other threads).
# Not actors_tests: CAF 0.17.6 is Debian's uninstrumented library, so TSan
# cannot see the happens-before of its mailboxes and reports every message
# handed between actors as a race in troupe's frames (device.cpp,
# Tensor::slice), which may not be suppressed; and each actor test takes
# 70 to 265 s under TSan (docs/SANITIZERS.md).
tsan_suites="collective_tests;tcp_tests;cluster_tests;ps_link_tests"

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(asan fuzz tsan)

"$root/scripts/setup.sh"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=OFF -DTROUPE_BUILD_BENCH=OFF -DTROUPE_BUILD_EXAMPLES=OFF
        "${launcher[@]}")

# Every step runs, whatever failed before it (but a step whose build failed
# is not run); the script fails at the end when any step did.
# The CPU time of finished children (user + sys, whole seconds), from the
# shell's `times`: on a machine shared with other jobs the wall time says
# little, the CPU time / 2 is what the step costs two idle cores.
cpu_file=$(mktemp)
trap 'rm -f "$cpu_file"' EXIT
children_cpu() {  # sets $cpu_now; `times` runs in this shell (a $(...) would be a fresh process)
  times > "$cpu_file"
  cpu_now=$(tail -1 "$cpu_file" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] } printf "%d", t }')
}
timings=()
failed=()
timed() {  # timed NAME COMMAND...: runs it and records its wall and CPU time and outcome
  local name=$1 start cpu rc
  shift
  echo "==== ci-sanitizers: $name"
  start=$(date +%s)
  children_cpu
  cpu=$cpu_now
  set +e
  "$@"
  rc=$?
  set -e
  children_cpu
  local line="$name: $(( $(date +%s) - start )) s wall, $(( cpu_now - cpu )) s CPU"
  [ $rc -eq 0 ] || { line="$line, FAILED (exit $rc)"; failed+=("$name"); }
  timings+=("$line")
  echo "==== ci-sanitizers: $line"
  return $rc
}

for step in "${steps[@]}"; do
  case "$step" in
    asan)
      timed "asan+ubsan build" bash -c "
        cmake -S '$root' -B '$asan_build' ${common[*]} -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
          -DTROUPE_SANITIZE=address,undefined -DTROUPE_FUZZ=ON '-DTROUPE_TEST_SUITES=$asan_suites' >/dev/null &&
        cmake --build '$asan_build' -j $jobs --target ${asan_suites//;/ } fuzzers" || continue
      timed "asan+ubsan tests" ctest --test-dir "$asan_build" --output-on-failure --timeout 900 -j "$jobs" || true
      ;;
    fuzz)
      # Every target (control_http's "hang" was the harness taking an EINTR
      # from libFuzzer's SIGALRM for a timeout: docs/FUZZING.md).
      timed "fuzz ($fuzz_seconds s per target)" env TROUPE_ASAN_BUILD_DIR="$asan_build" \
        "$root/scripts/fuzz.sh" "$fuzz_seconds" || true
      ;;
    tsan)
      timed "tsan build" bash -c "
        cmake -S '$root' -B '$tsan_build' ${common[*]} -DTROUPE_SANITIZE=thread '-DTROUPE_TEST_SUITES=$tsan_suites' \
          >/dev/null &&
        cmake --build '$tsan_build' -j $jobs --target ${tsan_suites//;/ }" || continue
      timed "tsan tests" ctest --test-dir "$tsan_build" --output-on-failure --timeout 900 -j "$jobs" || true
      ;;
    *)
      echo "ci-sanitizers: unknown step '$step' (asan, fuzz, tsan)" >&2
      exit 2
      ;;
  esac
done

echo "==== ci-sanitizers: times"
printf '  %s\n' "${timings[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "ci-sanitizers: FAILED: ${failed[*]}" >&2
  exit 1
fi
