# Helpers shared by the chaos scripts (elastic_chaos.sh, ps_chaos.sh):
# sourced, not run.

# Below the kernel's ephemeral range, as tests/support/ports.hpp (why
# there): a random port that binds now, else the kernel's choice. Prints
# the port; prints nothing and fails when none could be had. Debian's
# python3 (scripts/setup.sh installs it); TROUPE_PYTHON for another.
find_port() {
  "${TROUPE_PYTHON:-/usr/bin/python3}" - <<'PY'
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
def bind(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return s.getsockname()[1]
    except OSError:
        return 0
    finally:
        s.close()
for _ in range(100 if low > 11000 else 0):
    p = random.randrange(10000, low)
    if bind(p) == p:
        print(p)
        break
else:
    port = bind(0)
    if port:
        print(port)
    else:
        raise SystemExit("no loopback port could be bound")
PY
}

# free_port VAR: sets VAR to a free loopback port, or ends the script
# (status 1, which the EXIT traps clean up after) saying why: an empty
# port handed on would fail later as "missing port", far from the cause.
free_port() {
  # Not `local port`: the caller's variable is often named port, and
  # printf -v would set this function's own instead.
  local _free_port_found
  _free_port_found=$(find_port) || true
  if [[ ! "$_free_port_found" =~ ^[0-9]+$ ]] || ((_free_port_found == 0)); then
    echo "free_port: no free loopback port (${TROUPE_PYTHON:-/usr/bin/python3} picks it: is Debian's python3 installed?)" >&2
    exit 1
  fi
  printf -v "$1" '%s' "$_free_port_found"
}

# The highest "epoch 1 step N/" the coordinator logged (0 before any).
coordinator_step() {
  grep -o 'epoch 1 step [0-9]*' "$1" 2>/dev/null | awk '{ if ($4 > m) m = $4 } END { print m + 0 }'
}

# Waits until a child of this shell ended: RC = its exit status (124 after
# `limit` s). Not in a $(...) subshell: only this shell can reap its children.
wait_exit() {
  local pid=$1 end=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= end)); then RC=124; return; fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null
  RC=$?
}

# The troupe binary from the command line ($1): BIN, or usage and exit 2.
chaos_binary() {
  BIN=${1:-}
  if [[ -z "$BIN" || ! -x "$BIN" ]]; then
    echo "usage: $0 PATH/TO/troupe" >&2
    exit 2
  fi
  BIN=$(readlink -f "$BIN")
}

# TMP, a folder for the trials' logs, and the traps that leave nothing
# behind: every process in PIDS is killed on exit, and TMP removed unless
# TROUPE_CHAOS_KEEP=1.
chaos_folder() {
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  PIDS=()
  trap chaos_cleanup EXIT
  trap 'exit 2' INT TERM
}
chaos_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  if [[ "${TROUPE_CHAOS_KEEP:-0}" == 1 ]]; then echo "logs kept in $TMP"; else rm -rf "$TMP"; fi
}

# Counts a trial's result ($1 mode, $2 pass|fail|hang|late) in PASS, FAIL,
# HANG, LATE (associative arrays by mode) and `overall` (1 after any failure
# or hang). A late trial is one whose fault came after the work it was to
# disturb was done (a loaded machine can delay a script's polling past a
# short job's end): it tested nothing, so it is neither a pass nor a
# failure, and the summary shows it.
chaos_count() {
  case $2 in
    pass) PASS[$1]=$((PASS[$1] + 1)) ;;
    fail) FAIL[$1]=$((FAIL[$1] + 1)); overall=1 ;;
    hang) HANG[$1]=$((HANG[$1] + 1)); overall=1 ;;
    late) LATE[$1]=$((${LATE[$1]:-0} + 1)) ;;
  esac
}

# The summary of every mode in MODES, TRIALS each, with SEED (late trials,
# which a script repeats, on top). A mode of which no trial but late ones
# ran tested nothing: that fails the run.
chaos_summary() {
  local mode late
  echo
  echo "summary (seed $SEED):"
  for mode in $MODES; do
    late=${LATE[$mode]:-0}
    printf '  %-6s %d trial(s): %d passed, %d failed, %d hung%s\n' "$mode" "$TRIALS" "${PASS[$mode]}" "${FAIL[$mode]}" \
      "${HANG[$mode]}" "$( ((late > 0)) && echo "; $late more late (the fault came after the job's work)")"
    if ((TRIALS > 0 && PASS[$mode] + FAIL[$mode] + HANG[$mode] == 0)); then
      echo "  $mode: no trial's fault came in time; nothing was tested"
      overall=1
    fi
  done
}
