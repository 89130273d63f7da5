"""Bench: `flywheel eval` rollouts/s, the old path against the new, same tasks, seeds and model, in one run
(issue 15, goal 1).

Three evals of the first LIMIT held-out tool_call tasks (embedded model, greedy, up to 96 new tokens, batches of 16):
- old: transformers, every prompt prefilled whole (``prefix_cache=False``, the path before issue 15);
- transformers with shared-prefix reuse (today's path for evals under 100 rollouts);
- auto: vLLM for an eval of 100+ rollouts, its pending batches sent in calls of up to 256 rollouts.
Rollouts/s counts generation and scoring (``timings.rollouts_s``); the start (model load, vLLM engine) is apart.
Run: FLYWHEEL_VLLM_PYTHON=... .venv/bin/python bench/scripts/eval_speed.py DATASET OUT [LIMIT] [MODEL]
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


def one(name: str, out: Path, **options) -> dict:
    t0 = time.perf_counter()
    done = eval_policy(EvalConfig(dataset=DATASET, out=str(out / name), model=MODEL, limit=LIMIT, seed=0,
                                  max_tokens=96, temperature=0.0, batch_size=16, **options))
    wall = time.perf_counter() - t0
    release("vllm")
    report = json.loads(Path(done.report).read_text())
    gen = report["timings"]["rollouts_s"]
    return {"path": name, "backend": report["model"]["backend"], "start_s": round(report["timings"]["load_s"], 1),
            "rollouts_s": round(gen, 1), "rollouts_per_s": round(report["n_rollouts"] / gen, 3),
            "wall_s": round(wall, 1), "success": report["metrics"]["success_rate"]["value"],
            "completion_tokens": int(pl.read_parquet(out / name / "rollouts.parquet")["completion_tokens"].sum())}


if __name__ == "__main__":
    DATASET, OUT = sys.argv[1], Path(sys.argv[2])
    LIMIT = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    MODEL = sys.argv[4] if len(sys.argv) > 4 else None
    rows = [one("old", OUT, backend="transformers", prefix_cache=False),
            one("transformers", OUT, backend="transformers"),
            one("auto", OUT, backend="auto")]
    for row in rows:
        row["speedup_over_old"] = round(row["rollouts_per_s"] / rows[0]["rollouts_per_s"], 2)
        row["wall_speedup_over_old"] = round(rows[0]["wall_s"] / row["wall_s"], 2)
    texts = {r["path"]: pl.read_parquet(OUT / r["path"] / "rollouts.parquet")["completion"].to_list() for r in rows}
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU, Python {platform.python_version()}",
              "command": " ".join(sys.argv), "dataset": DATASET, "model": MODEL or "embedded", "limit": LIMIT,
              "rows": rows, "texts_identical_old_vs_transformers": texts["old"] == texts["transformers"],
              "texts_identical_old_vs_auto": sum(a == b for a, b in zip(texts["old"], texts["auto"]))}
    print(json.dumps(result, indent=2))
    (OUT / "result.json").write_text(json.dumps(result, indent=2) + "\n")
