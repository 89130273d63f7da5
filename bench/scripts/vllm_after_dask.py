"""Bench: a vLLM eval started after the flow's Dask LocalCluster, as in `flywheel run` (the dataset flow first).

Dask's nanny sets OMP_NUM_THREADS=1 (and more) in the parent's os.environ before spawning its workers; until
flows/runtime.py put the environment back, the vLLM worker started later inherited it. Records the eval's generation
time and what the worker process would inherit.
Run: .venv/bin/python bench/scripts/vllm_after_dask.py DATASET OUT [LIMIT]
(FLYWHEEL_VLLM_PYTHON: the .venv-vllm python)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import eval_policy
from flywheel.flows.runtime import dask_client

if __name__ == "__main__":
    DATASET, OUT = sys.argv[1], Path(sys.argv[2])
    LIMIT = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    with dask_client(2, None):
        pass
    inherited = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")}
    done = eval_policy(EvalConfig(dataset=DATASET, out=str(OUT), backend="vllm", limit=LIMIT, seed=0, max_tokens=96,
                                  temperature=0.0))
    report = json.loads(Path(done.report).read_text())
    print("RESULT", json.dumps({"inherited": inherited, "limit": LIMIT, **report["timings"],
                                "rollouts_per_s": round(report["n_rollouts"] / report["timings"]["rollouts_s"], 3)}))
