"""Bench: TRL's fused LM head scoring every position (TRL 1.16 off Triton) against only the labelled positions
(``tasks/training/train.py: score_labelled_positions_only``), same data, seed and config, in one run: SFT step time
and loss, GRPO step time split into rollout and update, and the per-step losses (which must match).

Run: .venv/bin/python bench/scripts/lm_head_positions.py DATASET [STEPS]
(writes bench/results/data/lm_head_positions.json)
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import trl.trainer.utils as trl_utils
from trl.kernels import chunked_logprob

import flywheel.tasks.training.train as train_module
from flywheel.tasks.training.train import TrainConfig, train

ORIGINAL, SCORE = chunked_logprob._use_triton, train_module.score_labelled_positions_only


def run(dataset: str, method: str, steps: int, labelled_only: bool) -> dict:
    # the old path: train() patches TRL, so replace the patch with a no-op that restores TRL's own choice
    train_module.score_labelled_positions_only = (lambda: None) if not labelled_only else SCORE
    trl_utils._use_triton = ORIGINAL
    out = tempfile.mkdtemp(prefix=f"lmhead-{method}-")
    try:
        config = TrainConfig(dataset=dataset, out=out, method=method, steps=steps, batch_size=8 if method ==
                             "grpo" else 4, num_generations=8, learning_rate=1e-3 if method == "sft" else 1e-5,
                             max_tokens=96, check_interval=0, save_steps=1000, eval_limit=4, refill=0)
        history = train(config)["history"]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    keys = ("step_time_s", "rollout_s", "update_s")
    mean = {k: round(sum(h[k] for h in history[1:]) / (len(history) - 1), 3) for k in keys if k in history[0]}
    return {"mean_after_first_step": mean, "loss": [h.get("loss") for h in history]}


def main() -> None:
    dataset, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6
    results = {f"{m}_{label}": run(dataset, m, steps, only) for m in ("sft", "grpo")
               for label, only in (("every_position", False), ("labelled_only", True))}
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    record = {"machine": machine,
              "command": f"python bench/scripts/lm_head_positions.py {dataset} {steps}",
              "model": "embedded SmolLM2-135M-Instruct (fp32), LoRA r=16 on attention", "results": results}
    print(json.dumps(record, indent=2))
    out = Path(__file__).resolve().parents[1] / "results" / "data" / "lm_head_positions.json"
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
