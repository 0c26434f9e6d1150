# Helpers shared by the chaos scripts (elastic_chaos.sh, ps_chaos.sh):
# sourced, not run.

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
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
