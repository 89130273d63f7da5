#!/usr/bin/env bash
# One command for the operations stack on this machine: a Prefect server on 127.0.0.1 (UI + API), the work pools
# "cpu" and "gpu", the global concurrency limit "gpu", the deployments of deploy/prefect.yaml, and the workers.
#   deploy/start.sh [--home DIR] [--port 4200] [--db URL] [--gpu-slots 1] [--no-gpu-worker]
#     --home DIR       where the Prefect database (SQLite by default), logs, results and outputs live (./flywheel-home)
#     --db URL         a PostgreSQL URL, e.g. postgresql+asyncpg://prefect@127.0.0.1:5432/prefect (deploy/postgres.sh
#                      starts one); use it for real work: SQLite locks up under many concurrent task runs
#     --gpu-slots N    slots of the "gpu" concurrency limit: one per GPU of the gpu worker's machine
#     --no-gpu-worker  the gpu pool's worker runs on a GPU machine instead: there, run
#                      PREFECT_API_URL=http://<this host>:PORT/api prefect worker start --pool gpu
# Then: source DIR/env.sh to point the prefect CLI at the server; deploy/stop.sh --home DIR stops it all.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
home=$PWD/flywheel-home port=4200 db="" gpu_slots=1 gpu_worker=1
while [ $# -gt 0 ]; do
  case $1 in
    --home) home=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --db) db=$2; shift 2 ;;
    --gpu-slots) gpu_slots=$2; shift 2 ;;
    --no-gpu-worker) gpu_worker=0; shift ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case $gpu_slots in ""|*[!0-9]*|0*|?????*) echo "--gpu-slots must be a whole number from 1 to 9999, got '$gpu_slots'" >&2; exit 2 ;; esac
case $port in ""|*[!0-9]*|0*|??????*) echo "--port must be a whole number from 1 to 65535, got '$port'" >&2; exit 2 ;; esac
[ "$port" -le 65535 ] || { echo "--port must be a whole number from 1 to 65535, got '$port'" >&2; exit 2; }
case $db in ""|postgresql+asyncpg://*|sqlite+aiosqlite://*) ;; *) echo "--db must be postgresql+asyncpg://... or sqlite+aiosqlite://..., got $db" >&2; exit 2 ;; esac
mkdir -p "$home/logs" && home=$(cd "$home" && pwd)
bin=$root/.venv/bin
[ -x "$bin/prefect" ] || { echo "no $bin/prefect: run deploy/install.sh first" >&2; exit 2; }
# shellcheck source=deploy/pids.sh
source "$root/deploy/pids.sh"
started() { ours "$1" >/dev/null; }  # the pid file names the live process launch() started
# a port another program holds would answer the health check below for a server that could not bind it: this
# home's pools, gpu limit, deployments and workers would go to another home's server; and this home's running
# server stays on its port (env.sh, which its users source, keeps saying which)
if started server; then
  grep -Fq "PREFECT_API_URL=http://127.0.0.1:$port/api" "$home/env.sh" || {
    echo "this home's prefect server (pid $(cat "$home/server.pid")) runs on $(grep -o 'API_URL=http://127.0.0.1:[0-9]*' "$home/env.sh" | cut -d/ -f3)," \
         "not port $port: nothing changed; pass its --port, or deploy/stop.sh --home $home first" >&2; exit 1; }
elif (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "port $port on 127.0.0.1 is in use by another program (another home's Prefect server?): nothing started;" \
       "pass --port with a free port" >&2
  exit 1
fi
cat >"$home/env.sh" <<ENV
export PREFECT_HOME=$home/prefect PREFECT_API_URL=http://127.0.0.1:$port/api
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 GX_ANALYTICS_ENABLED=false
export PREFECT_RESULTS_LOCAL_STORAGE_PATH=$home/results FLYWHEEL_HOME=$home FLYWHEEL_ROOT=$root
${db:+export PREFECT_API_DATABASE_CONNECTION_URL=$db}
ENV
# shellcheck disable=SC1091
source "$home/env.sh"
launch() {  # name, command...: a background process with its own session, log and pid file
  local name=$1; shift
  started "$name" && { echo "$name already running (pid $(cat "$home/$name.pid"))"; return; }
  setsid "$@" >>"$home/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$home/$name.pid"
}
launch server "$bin/prefect" server start --host 127.0.0.1 --port "$port"
healthy=0
for _ in $(seq 240); do  # an answer counts while ours runs: one that exited is not whatever answers on the port
  "$bin/python" -c "import httpx,sys; sys.exit(httpx.get('$PREFECT_API_URL/health', timeout=1).status_code != 200)" 2>/dev/null && started server && { healthy=1; break; }
  started server || { echo "prefect server exited; see $home/logs/server.log:" >&2; tail -20 "$home/logs/server.log" >&2; exit 1; }
  sleep 0.5
done
[ "$healthy" = 1 ] || { echo "the prefect server (pid $(cat "$home/server.pid")) did not answer $PREFECT_API_URL/health" \
  "within 2 minutes; see $home/logs/server.log" >&2; exit 1; }
cd "$root"
"$bin/python" deploy/pools.py "$gpu_slots" 2>"$home/logs/pools.log" \
  || { echo "setting the work pools and the gpu limit failed; see $home/logs/pools.log:" >&2
       tail -5 "$home/logs/pools.log" >&2; exit 1; }
"$bin/prefect" --no-prompt deploy --all --prefect-file deploy/prefect.yaml >"$home/logs/deploy.log" 2>&1 \
  || { echo "prefect deploy failed; see $home/logs/deploy.log:" >&2; tail -20 "$home/logs/deploy.log" >&2; exit 1; }
launch worker-cpu "$bin/prefect" worker start --pool cpu --type process --name "cpu-$(hostname)"
[ "$gpu_worker" = 1 ] && launch worker-gpu "$bin/prefect" worker start --pool gpu --type process --limit "$gpu_slots" --name "gpu-$(hostname)"
echo "Prefect UI: http://127.0.0.1:$port  (API $PREFECT_API_URL; database ${db:-SQLite in $PREFECT_HOME})"
echo "deployments: $(grep -c '^  - name:' deploy/prefect.yaml) from deploy/prefect.yaml; logs in $home/logs"
echo "run one:     source $home/env.sh && prefect deployment run 'generate-dataset/on-demand' --param seed=7 --param n=200"
