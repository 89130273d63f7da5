#!/usr/bin/env bash
# Stops what deploy/start.sh started under --home DIR (default ./flywheel-home): workers first (SIGINT: a process
# worker ignores SIGTERM; both are signalled at once; an idle one is stopped within a second, a busy one gets up to
# --grace S seconds, default 30, for its flow runs to end: a flow run still going then keeps running without its
# worker), then the server (as long, then killed). The database and all outputs stay.
# A pid file whose process is gone, or was reused by another program, is removed without signalling anything.
set -uo pipefail
home=$PWD/flywheel-home
grace=30
usage="usage: deploy/stop.sh [--home DIR] [--grace SECONDS]"
while [ $# -gt 0 ]; do
  case "$1" in
    --home) home=${2:?--home DIR}; shift 2 ;;
    --grace) grace=${2-}; [ $# -ge 2 ] && shift 2 || shift ;;
    *) echo "unknown option $1 ($usage)" >&2; exit 2 ;;
  esac
done
case $grace in ""|*[!0-9]*|0*|?????*) grace_ok=false ;; *) [ "$grace" -le 3600 ] && grace_ok=true || grace_ok=false ;; esac
$grace_ok || { echo "--grace must be a whole number of seconds from 1 to 3600, got '$grace'" >&2; exit 2; }
[ -d "$home" ] && home=$(cd "$home" && pwd)  # as start.sh wrote it into env.sh: absolute
# shellcheck source=deploy/pids.sh
source "$(dirname "$(readlink -f "$0")")/pids.sh" || exit 1
signal() {  # signal, name...: send the signal to each process group start.sh launched; print the pids signalled
  local sig=$1; shift
  for name in "$@"; do
    [ -f "$home/$name.pid" ] || continue
    local pid; pid=$(ours "$name") || {
      echo "$name.pid names pid $(tr -dc '[:alnum:]' <"$home/$name.pid" | head -c 20), not this home's prefect $name: a stale pid file," \
           "removed; nothing signalled" >&2
      continue; }
    kill "-$sig" -- "-$pid" 2>/dev/null || kill "-$sig" "$pid" 2>/dev/null
    echo "$pid"
  done
}
stop() {  # workers|server, signal, name...: signal them, wait up to --grace for all, then SIGKILL what is left. Workers:
  # Prefect's worker exits only on a second signal, even when idle (a wait of the whole grace), so a worker seen with no
  # flow run process under it at three checks in a row (1 s: time to report a run that just ended) is killed then,
  # as a second Ctrl-C would do.
  local kind=$1; shift
  local pids; pids=$(signal "$@")
  declare -A idle=()
  for _ in $(seq $((grace * 2))); do
    local alive=0
    for pid in $pids; do
      case $(ps -o stat= -p "$pid" 2>/dev/null) in ""|Z*) continue ;; esac  # zombies are gone
      if [ "$kind" = workers ] && [ -z "$(ps -o stat= --ppid "$pid" | grep -v '^Z')" ]; then  # no live child
        idle[$pid]=$(( ${idle[$pid]:-0} + 1 ))
        [ "${idle[$pid]}" -ge 3 ] && { kill -KILL -- "-$pid" 2>/dev/null; continue; }
      else
        idle[$pid]=0
      fi
      alive=1
    done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
  for pid in $pids; do kill -KILL -- "-$pid" 2>/dev/null; done
  shift; for name in "$@"; do rm -f "$home/$name.pid"; done
}
stop workers INT worker-gpu worker-cpu; stop server TERM server
echo "stopped the Prefect stack in $home"
