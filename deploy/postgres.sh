#!/usr/bin/env bash
# A throwaway PostgreSQL server for Prefect, from Debian's postgresql package, on 127.0.0.1 only.
#   deploy/postgres.sh start DIR [PORT]   initdb DIR once, start it, create database "prefect", print the URL
#   deploy/postgres.sh stop DIR           stop it (data stays in DIR)
# Pass the printed URL to deploy/start.sh --db. Real deployments use a managed PostgreSQL instead.
set -euo pipefail
cmd=${1:?usage: postgres.sh start DIR [PORT] | stop DIR}
dir=$(realpath -m "${2:?usage: postgres.sh start DIR [PORT] | stop DIR}")
port=${3:-5432}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$bin/pg_ctl" ] || { echo "PostgreSQL is not installed: run 'apt-get install postgresql' (deploy/install.sh does as root)" >&2; exit 2; }
# postgres refuses to run as root: run it as the postgres user, which owns DIR
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $cmd in
  start)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_pg test -w "$dir" || { echo "user postgres cannot write $dir: every parent folder must be traversable (e.g. use /tmp/NAME)" >&2; exit 2; }
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_pg "$bin/initdb" -D "$dir/data" -U prefect --auth=trust -E UTF8 >"$dir/initdb.log"
    fi
    if as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then  # running: on its own port (postmaster.pid line 4)
      running=$(sed -n 4p "$dir/data/postmaster.pid")
      [ "$running" = "$port" ] || { echo "the PostgreSQL in $dir already runs on port $running, not $port: pass $running, or stop it first" >&2; exit 2; }
    else
      as_pg "$bin/pg_ctl" -D "$dir/data" -o "-h 127.0.0.1 -p $port -k $dir" -l "$dir/postgres.log" -w -t 60 start >/dev/null
    fi
    "$bin/psql" -h 127.0.0.1 -p "$port" -U prefect -d postgres -tAc "select 1 from pg_database where datname='prefect'" | grep -q 1 \
      || "$bin/psql" -h 127.0.0.1 -p "$port" -U prefect -d postgres -qc "create database prefect"
    echo "postgresql+asyncpg://prefect@127.0.0.1:$port/prefect"
    ;;
  stop)
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  *) echo "unknown command $cmd: start or stop" >&2; exit 2 ;;
esac
