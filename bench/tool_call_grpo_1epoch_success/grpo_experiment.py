"""GRPO experiment:
python grpo_experiment.py NAME START_ADAPTER STEPS PROMPTS LR TEMP CURRIC_TASKS"""
import json
import os
import sys
import time
from pathlib import Path

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import eval_policy
from flywheel.flows.promote import load_evals
from flywheel.flows.train import train_policy
from flywheel.tasks.release.gate import GateConfig, paired, success_delta
from flywheel.tasks.training.train import TrainConfig

if os.environ.get("GX_BINARY"):
    from flywheel.tasks.training import train_log
    _orig = train_log.VerifierReward.__call__
    def _binary(self, *a, **k):
        return [None if r is None else 1.0 if r >= 1.0 else (-1.0 if r <= -1.0 else 0.0) for r in _orig(self, *a, **k)]
    train_log.VerifierReward.__call__ = _binary
name, start, steps, prompts, lr, temp, ct = sys.argv[1:8]
steps, prompts, lr, temp, ct = int(steps), int(prompts), float(lr), float(temp), int(ct)
DS = "/tmp/fullrun2/datasets/tool_call/v-4326ea0a789b"
out = Path("/tmp/gx4") / name
tag = Path(start).name
base = Path("/tmp/gx4") / f"greedy_{tag}"
curr = Path("/tmp/gx4") / f"curr_{tag}_{ct}"
t0 = time.time()
if not (base / "report.json").exists():
    eval_policy(EvalConfig(dataset=DS, out=str(base), model=start, limit=200, seed=0, max_tokens=96, temperature=0.0))
if not (curr / "per_task.parquet").exists():
    eval_policy(EvalConfig(dataset=DS, split="train", out=str(curr), model=start, samples=4, temperature=1.0,
                           limit=ct, seed=0, max_tokens=96))
t1 = time.time()
cfg = TrainConfig(dataset=DS, out=str(out), method="grpo", model=start, skip_tasks=str(curr / "per_task.parquet"),
                  limit=ct, max_steps=steps, batch_size=8 * prompts, micro_batch=8, learning_rate=lr,
                  num_generations=8, loss_type="dapo", refill=2, max_completion_length=96, eval_limit=200,
                  eval_interval=max(1, steps // 4), validation=32, save_steps=max(1, steps // 4), seed=0,
                  temperature=temp, reward="success")
ev = EvalConfig(dataset=DS, out=str(out / "eval"), limit=200, seed=0, max_tokens=96, temperature=0.0)
res = train_policy(cfg, ev)
t2 = time.time()
_, a, _, b = load_evals(str(base), str(out / "eval"))
d = success_delta(paired(a, b), GateConfig(seed=0))
print("RESULT", json.dumps({"name": name, "prep_s": round(t1 - t0), "train_eval_s": round(t2 - t1),
                  "selected": res.selected_step, "success": res.metrics["success_rate"].value,
                  "base": json.load(open(base / "report.json"))["metrics"]["success_rate"]["value"],
                  "delta": d.delta, "ci": [d.ci_low, d.ci_high]}))
