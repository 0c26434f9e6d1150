#!/usr/bin/env bash
# tests/chaos/lib.sh's free_port: a port that binds, or, where none can be
# had (here: no python to pick it, as on a fresh Debian before this was
# fixed), the script ends with status 1 naming why, and never hands an
# empty port to the next command.
set -u
here=$(dirname "$(readlink -f "$0")")
fail() { echo "test_free_port: FAIL: $*" >&2; exit 1; }

# As the scripts call it: into a variable named port, under set -u, also
# from a function whose own local is named port (node_faults.sh's run_trial).
out=$(bash -c 'set -u; source "$1"; free_port port; echo "$port"' _ "$here/lib.sh") ||
  fail "free_port failed on loopback: $out"
[[ "$out" =~ ^[0-9]+$ ]] && ((out > 0)) || fail "free_port gave '$out'"
out2=$(bash -c 'set -u; source "$1"; trial() { local port; free_port port; echo "$port"; }; trial' _ "$here/lib.sh") ||
  fail "free_port into a caller's local failed: $out2"
[[ "$out2" =~ ^[0-9]+$ ]] && ((out2 > 0)) || fail "free_port into a caller's local gave '$out2'"
echo "test_free_port: free_port gave $out, and $out2 into a caller's local"

err=$(TROUPE_PYTHON=/nonexistent/python3 bash -c 'set -u; source "$1"; free_port port; echo "reached with [$port]"' _ "$here/lib.sh" 2>&1)
rc=$?
((rc == 1)) || fail "free_port without a python exited $rc: $err"
[[ "$err" == *"no free loopback port"* && "$err" == *"/nonexistent/python3"* ]] || fail "free_port without a python said: $err"
[[ "$err" != *reached* ]] || fail "the script went on after free_port failed: $err"
echo "test_free_port: without a python: exit 1 and the reason"
