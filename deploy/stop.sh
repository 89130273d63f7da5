#!/usr/bin/env bash
# Stops what deploy/start.sh started under --home DIR (default ./flywheel-home): workers first (SIGINT: a process
# worker ignores SIGTERM), then the server. The database and all outputs stay.
set -uo pipefail
home=$PWD/flywheel-home
[ "${1:-}" = "--home" ] && home=${2:?--home DIR}
stop() {  # name, signal
  local pidfile=$home/$1.pid
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  kill "-$2" -- "-$pid" 2>/dev/null || kill "-$2" "$pid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null
  rm -f "$pidfile"
}
stop worker-gpu INT; stop worker-cpu INT; stop server TERM
echo "stopped the Prefect stack in $home"
