# Sourced by deploy/start.sh and deploy/stop.sh: the pid files under $home. A pid file can outlive its process (a
# reboot, a kill -9) and the pid be reused by another program, so a pid counts as ours only while it leads its own
# session (start.sh launches each with setsid) running `prefect server start` or `prefect worker start`.
ours() {  # name: print the pid of $home/name.pid if that process is the one start.sh launched and is alive
  local pid sid args; pid=$(cat "$home/$1.pid" 2>/dev/null) || return 1
  case $pid in ""|*[!0-9]*) return 1 ;; esac
  read -r sid args < <(ps -o sid=,args= -p "$pid" 2>/dev/null) || return 1
  [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" != Z ] || return 1  # killed, not yet reaped: down
  [ "$sid" = "$pid" ] && [[ $args =~ prefect\ (server|worker)\ start ]] && echo "$pid"
}
