#!/usr/bin/env bash
# Stops what deploy/start.sh started under --home DIR (default ./flywheel-home): workers first (SIGINT: a process
# worker ignores SIGTERM; both workers are signalled at once and given 30 s together to finish their flow runs), then
# the server.
# The database and all outputs stay.
set -uo pipefail
home=$PWD/flywheel-home
[ "${1:-}" = "--home" ] && home=${2:?--home DIR}
signal() {  # signal, name...: send the signal to each process group; print the pids signalled
  local sig=$1; shift
  for name in "$@"; do
    [ -f "$home/$name.pid" ] || continue
    local pid; pid=$(cat "$home/$name.pid")
    kill "-$sig" -- "-$pid" 2>/dev/null || kill "-$sig" "$pid" 2>/dev/null
    echo "$pid"
  done
}
stop() {  # signal, name...: signal them, wait up to 30 s for all, then SIGKILL what is left. A worker has finished
  # once no flow run process is left under it: Prefect's worker exits only on a second signal, even when idle (a
  # wait of the whole 30 s), so an idle worker is killed at once, as a second Ctrl-C would do.
  local pids; pids=$(signal "$@")
  for _ in $(seq 60); do
    local alive=0
    for pid in $pids; do
      case $(ps -o stat= -p "$pid" 2>/dev/null) in ""|Z*) continue ;; esac  # zombies are gone
      if [ "$1" = INT ] && [ -z "$(ps -o pid= --ppid "$pid")" ]; then kill -KILL -- "-$pid" 2>/dev/null; continue; fi
      alive=1
    done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
  for pid in $pids; do kill -KILL -- "-$pid" 2>/dev/null; done
  shift; for name in "$@"; do rm -f "$home/$name.pid"; done
}
stop INT worker-gpu worker-cpu; stop TERM server
echo "stopped the Prefect stack in $home"
