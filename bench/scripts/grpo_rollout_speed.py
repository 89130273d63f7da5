"""Bench: the generation phase of GRPO steps, three rollout paths, same model, data, seed and settings, in one run
(issue 15, goal 2).

``flywheel train --method grpo`` (``tasks.training.train.train``) from the embedded model on a tool_call dataset, STEPS
steps of one prompt x 8 completions x up to 64 tokens at temperature 1, no filtering (--refill 0), no held-out checks:
- old: TRL's own transformers generation (8 left-padded copies of the prompt, ``--no-prefix-cache --refill 0``);
- transformers: the project's rollout path (one prefill shared by the 8, stops at the end token);
- vllm: the same path sampling on a vLLM engine that gets the policy's weights after every step (``--rollout-backend
  vllm``; the weights' transfer is counted in the rollout time; the engine's start is not, it is reported apart).
Per step, from metrics.jsonl: ``step_time_s``, ``rollout_s`` (the rollout function's seconds: generation, weight
transfer, scoring) and ``update_s``; and ``generate_s``, the seconds in TRL's ``GRPOTrainer._generate`` (timed here),
the generation phase of every path alike: TRL's own generation, or the rollout function it calls. The speed-ups are
on ``generate_s`` of steps 2 on (step 1 of the vllm path starts the engine, reported apart).
Run: FLYWHEEL_VLLM_PYTHON=... .venv/bin/python bench/scripts/grpo_rollout_speed.py DATASET OUT [STEPS]
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from trl import GRPOTrainer

from flywheel.tasks.training.train import TrainConfig, train

GENERATE: dict[int, float] = {}  # optimizer step -> seconds in GRPOTrainer._generate
_generate = GRPOTrainer._generate


def _timed_generate(self, prompts):
    t0 = time.perf_counter()
    try:
        return _generate(self, prompts)
    finally:
        step = self.state.global_step + 1
        GENERATE[step] = GENERATE.get(step, 0.0) + time.perf_counter() - t0


GRPOTrainer._generate = _timed_generate


def one(name: str, **options) -> dict:
    GENERATE.clear()
    t0 = time.perf_counter()
    result = train(TrainConfig(dataset=DATASET, out=str(OUT / name), method="grpo", steps=STEPS, batch_size=8,
                               num_generations=8, max_tokens=64, refill=0, check_interval=0, eval_limit=1,
                               save_steps=1000, seed=0, **options))
    rows = [r for r in result["history"] if r["step"] > 0]
    return {"path": name, "wall_s": round(time.perf_counter() - t0, 1), "train_s": result["train_s"],
            "step_time_s": [r.get("step_time_s") for r in rows], "rollout_s": [r.get("rollout_s") for r in rows],
            "update_s": [r.get("update_s") for r in rows],
            "generate_s": [round(GENERATE.get(r["step"], 0.0), 3) for r in rows],
            "completion_length": [r.get("completions/mean_length") for r in rows]}


if __name__ == "__main__":
    DATASET, OUT = sys.argv[1], Path(sys.argv[2])
    STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    rows = [one("old", prefix_cache=False), one("transformers"), one("vllm", rollout_backend="vllm")]
    for row in rows:
        row["mean_generate_s"] = round(sum(row["generate_s"][1:]) / (len(row["generate_s"]) - 1), 3)  # steps 2 on
        row["speedup_over_old"] = round(rows[0]["mean_generate_s"] / row["mean_generate_s"], 2)
    print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU", "command": " ".join(sys.argv),
                      "rows": rows}, indent=2))
    (OUT / "result.json").write_text(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                                                 "command": " ".join(sys.argv), "rows": rows}, indent=2) + "\n")
