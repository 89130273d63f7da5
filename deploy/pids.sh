# Sourced by deploy/start.sh and deploy/stop.sh (bash, Linux /proc): the pid files under $home. A pid file can
# outlive its process (a reboot, a kill -9) and its pid be reused by another program, even by another home's
# stack, so a pid counts as ours only while that process is alive (not a zombie), leads its own session (start.sh
# launches each with setsid), runs `prefect server start` or `prefect worker start`, and was started for this home
# (FLYWHEEL_HOME=$home in its environment, from $home/env.sh).
ours() {  # name: print the pid of $home/name.pid if it is the live process start.sh launched for $home
  local pid stat fields args; pid=$(cat "$home/$1.pid" 2>/dev/null) || return 1
  case $pid in ""|*[!0-9]*) return 1 ;; esac
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  read -ra fields <<<"${stat##*) }"  # after "(comm) ": state ppid pgrp session ...
  [ "${fields[0]}" != Z ] && [ "${fields[3]}" = "$pid" ] || return 1
  args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)  # every argument ends with a space
  [[ $args =~ /prefect\ (server|worker)\ start\  ]] || return 1
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -Fqx "FLYWHEEL_HOME=$home" && echo "$pid"
}
