#!/usr/bin/env bash
# A real multi-process Dask cluster on one machine: one scheduler and N single-threaded workers on 127.0.0.1.
#   deploy/dask/start-local.sh [WORKERS=2] [PORT=8786]    then pass --dask-address tcp://127.0.0.1:PORT
# Stop it with: kill -INT -- -$(cat dask-cluster.pid)   (the whole process group)
set -euo pipefail
workers=${1:-2} port=${2:-8786}
bin=$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin
setsid bash -c "
  '$bin/dask' scheduler --host 127.0.0.1 --port $port --no-dashboard &
  sleep 2
  for i in \$(seq $workers); do '$bin/dask' worker tcp://127.0.0.1:$port --host 127.0.0.1 --nthreads 1 --no-dashboard & done
  wait" >dask-cluster.log 2>&1 &
echo $! >dask-cluster.pid
echo "Dask scheduler tcp://127.0.0.1:$port with $workers workers (log dask-cluster.log)"
