#!/usr/bin/env bash
# Screenshots of the Prefect UI showing a finished end-to-end pipeline run and its artifacts, for docs/.
#   deploy/screenshot.sh [--home DIR] [--port 4210]
# Starts the stack (deploy/start.sh, SQLite), runs the 'flywheel-run/end-to-end' deployment at a reduced size
# (training and promotion go through the train-policy/gpu and promote/gate deployments, as on a cluster),
# waits for it, then takes the pictures with headless Chromium (Debian's package; installed here as root if
# missing) and stops the stack. About 10 minutes on 2 CPU cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
home=$(mktemp -d /tmp/flywheel-shot-XXXX) port=4210
while [ $# -gt 0 ]; do
  case $1 in
    --home) home=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    *) echo "unknown option $1: --home DIR, --port N" >&2; exit 2 ;;
  esac
done
if ! command -v chromium >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "needs Debian's chromium: sudo apt-get install chromium" >&2; exit 2; }
  apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
fi
cd "$root"
bash deploy/start.sh --home "$home" --port "$port"
trap 'bash deploy/stop.sh --home "$home" >/dev/null' EXIT
# shellcheck disable=SC1091
source "$home/env.sh"
out=$(.venv/bin/prefect deployment run 'flywheel-run/end-to-end' --watch --watch-timeout 1800 \
  --param n=60 --param eval_limit=8 --param sft_steps=6 --param grpo_steps=1 --param num_generations=2 \
  --param max_tokens=32 --param "out=$home/runs/screenshot" 2>&1) || { echo "$out" | tail -30 >&2; exit 1; }
run_id=$(echo "$out" | grep -oE 'UUID: *[0-9a-f-]{36}' | head -1 | grep -oE '[0-9a-f-]{36}$')
shot() {  # url, file
  chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1300 \
    --virtual-time-budget=20000 --screenshot="$2" "$1" >/dev/null 2>&1
  echo "wrote $2"
}
shot "http://127.0.0.1:$port/runs/flow-run/$run_id" docs/ui-pipeline-run.png
artifact() {  # the newest artifact with key $1
  .venv/bin/python -c "
from prefect import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.sorting import ArtifactSort
with get_client(sync_client=True) as c:
    print(c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=['$1'])), sort=ArtifactSort.CREATED_DESC, limit=1)[0].id)"
}
shot "http://127.0.0.1:$port/artifacts/artifact/$(artifact flywheel-run)" docs/ui-artifact-before-after.png
shot "http://127.0.0.1:$port/artifacts/artifact/$(artifact gate-report)" docs/ui-artifact-gate.png
