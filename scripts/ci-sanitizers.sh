#!/usr/bin/env bash
# The sanitizer part of CI (.ci/run runs it after scripts/test.sh;
# docs/SANITIZERS.md says what and why, with each step's time):
#   1. AddressSanitizer + UndefinedBehaviorSanitizer (Clang): build the unit
#      test suites below and the fuzz targets in one directory, and run the
#      tests;
#   2. every fuzz target for TROUPE_CI_FUZZ_SECONDS (default 10) each
#      (scripts/fuzz.sh, same build directory);
#   3. ThreadSanitizer (GCC): build CAF with TSan (scripts/build-caf-tsan.sh),
#      then build and run the suites of troupe's threads and of the actors
#      (tsan_suites below).
# Benchmarks and examples are not built. Each build has a directory of its
# own: $TROUPE_ASAN_BUILD_DIR (./build-asan), $TROUPE_TSAN_BUILD_DIR
# (./build-tsan) and $TROUPE_CAF_TSAN_DIR (./build-caf-tsan/install). Any sanitizer report fails its test (UBSan through
# halt_on_error, ASan and LeakSanitizer by default, TSan with exit status
# 66); suppressions, for third-party code only, are in cmake/sanitizers/.
#
#   scripts/ci-sanitizers.sh [asan] [fuzz] [tsan]     (all three when none is named)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
asan_build=${TROUPE_ASAN_BUILD_DIR:-$root/build-asan}
tsan_build=${TROUPE_TSAN_BUILD_DIR:-$root/build-tsan}
caf_tsan=${TROUPE_CAF_TSAN_DIR:-$root/build-caf-tsan/install}
fuzz_seconds=${TROUPE_CI_FUZZ_SECONDS:-10}
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
# And actors_tests: the actors' mailboxes, the data loaders' queues, the
# devices' shard pushes from their own threads, mode switches and views.
# TSan sees CAF's happens-before only when CAF itself is instrumented, so
# the step first builds CAF 0.17.6 from Debian's source with TSan
# (scripts/build-caf-tsan.sh, about 3 minutes; Debian's libcaf is not
# instrumented and makes every message between actors look like a race).
# Should that build fail (no deb-src reachable), the other suites still run
# under TSan and the step says loudly that actors_tests did not.
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
      suites=$tsan_suites caf_root=""
      if timed "caf tsan build" "$root/scripts/build-caf-tsan.sh" "$caf_tsan"; then
        suites="$tsan_suites;actors_tests" caf_root=$caf_tsan
      else
        failed=("${failed[@]:0:${#failed[@]}-1}")  # not a failure of troupe's: the step goes on without CAF's build
        timings+=("  ^ WARNING: no ThreadSanitizer build of CAF, so actors_tests did NOT run under TSan")
        echo "==== ci-sanitizers: WARNING: actors_tests will not run under ThreadSanitizer (CAF could not be built with it)"
      fi
      timed "tsan build" bash -c "
        cmake -S '$root' -B '$tsan_build' ${common[*]} -DTROUPE_SANITIZE=thread '-DTROUPE_TEST_SUITES=$suites' \
          '-DTROUPE_CAF_ROOT=$caf_root' >/dev/null &&
        cmake --build '$tsan_build' -j $jobs --target ${suites//;/ }" || continue
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
