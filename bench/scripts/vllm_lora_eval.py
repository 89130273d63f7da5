"""Bench: `flywheel eval` on transformers against vLLM serving a LoRA adapter on its base (no merge), same tasks,
seeds and sampling, in one run on one machine.

For each model (the base, and a LoRA adapter) and each backend, one eval of the first LIMIT held-out tasks, greedy,
up to 96 new tokens (``flywheel run``'s eval settings), batch BATCH. Records rollouts/s (generation only, the
engine's start apart), the start, held-out success, and how many texts are byte-identical across backends (vLLM
runs bf16 on CPUs with native bf16, transformers fp32: greedy texts may part where two tokens are near-tied).
Run: .venv/bin/python bench/scripts/vllm_lora_eval.py DATASET ADAPTER OUT [LIMIT] [BATCH]
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import polars as pl

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import eval_policy
from flywheel.tasks.inference.policy import release

DATASET, ADAPTER, OUT = sys.argv[1], sys.argv[2], Path(sys.argv[3])
LIMIT = int(sys.argv[4]) if len(sys.argv) > 4 else 200
BATCH = int(sys.argv[5]) if len(sys.argv) > 5 else 16


def one(model: str | None, backend: str) -> dict:
    out = OUT / f"{'adapter' if model else 'base'}-{backend}"
    t0 = time.perf_counter()
    done = eval_policy(EvalConfig(dataset=DATASET, out=str(out), model=model, backend=backend, limit=LIMIT, seed=0,
                                  max_tokens=96, temperature=0.0, batch_size=BATCH))
    wall = time.perf_counter() - t0
    release("vllm")
    report = json.loads(Path(done.report).read_text())
    gen = report["timings"]["rollouts_s"]
    return {"backend": backend, "model": model or "embedded", "start_s": round(report["timings"]["load_s"], 1),
            "rollouts_s": round(gen, 1), "rollouts_per_s": round(report["n_rollouts"] / gen, 3),
            "wall_s": round(wall, 1), "success": report["metrics"]["success_rate"]["value"],
            "valid": report["metrics"]["valid_output_rate"]["value"], "folder": str(out)}


def same_texts(a: str, b: str) -> int:
    cols = ["task_id", "completion"]
    x, y = (pl.read_parquet(Path(f) / "rollouts.parquet").select(cols).sort("task_id") for f in (a, b))
    return int((x["completion"] == y["completion"]).sum())


rows = [one(m, b) for m in (None, ADAPTER) for b in ("transformers", "vllm")]
for t, v in ((rows[0], rows[1]), (rows[2], rows[3])):
    v["speedup"] = round(v["rollouts_per_s"] / t["rollouts_per_s"], 2)
    v["texts_identical"] = f"{same_texts(t['folder'], v['folder'])} of {LIMIT}"
result = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU", "dataset": DATASET, "adapter": ADAPTER,
          "limit": LIMIT, "batch": BATCH, "command": " ".join(sys.argv), "rows": rows}
print(json.dumps(result, indent=2))
(OUT / "result.json").write_text(json.dumps(result, indent=2) + "\n")
