"""The full profile's GRPO stage again from its SFT adapter with one setting changed, paired against that SFT on
the same 1,000 held-out tasks by the gate's test (bench/results/learning.md).
python bench/scripts/grpo_stage_variant.py RUN OUT KEY=VALUE...:
RUN is a `flywheel run --profile full` folder; its grpo/train_config.json is
the recipe (curriculum file, validation slice, seed, rollouts on vLLM), KEY=VALUE overrides TrainConfig fields
(e.g. replay_focus=step); the held-out eval is the profile's (vLLM, greedy, seed 0, 96 tokens) and pairs with
RUN/sft/eval. eval_dataset=VERSION trains on another dataset's train tasks (dataset=...) and still judges on the
run's held-out tasks."""
import json
import sys
import time
from pathlib import Path

import polars as pl

from flywheel.flows.config import EvalConfig
from flywheel.flows.promote import load_evals
from flywheel.flows.train import train_policy
from flywheel.tasks.release.gate import GateConfig, paired, success_delta
from flywheel.tasks.training.train import TrainConfig

run, out = Path(sys.argv[1]), Path(sys.argv[2])
recipe = json.loads((run / "grpo" / "train_config.json").read_text(encoding="utf-8"))
judge = recipe["dataset"]
for kv in sys.argv[3:]:
    key, value = kv.split("=", 1)
    if key == "eval_dataset":
        judge = value
        continue
    recipe[key] = type(recipe[key])(value) if recipe.get(key) is not None else value
recipe["out"] = str(out)
sft = json.loads((run / "sft" / "eval" / "report.json").read_text(encoding="utf-8"))
t0 = time.time()
res = train_policy(TrainConfig(**recipe), EvalConfig(
    dataset=judge, out=str(out / "eval"), limit=sft["n_tasks"], seed=sft["seed"],
    max_tokens=sft["sampling"]["max_tokens"], temperature=0.0, backend=sft["model"]["backend"]))
_, a, _, b = load_evals(str(run / "sft" / "eval"), str(out / "eval"))
p = paired(a, b)
d = success_delta(p, GateConfig(seed=0))
print("RESULT", json.dumps({"overrides": sys.argv[3:], "wall_s": round(time.time() - t0),
                            "selected": res.selected_step,
                            "sft": round(p["success"].mean(), 4), "grpo": round(p["success_cand"].mean(), 4),
                            "delta": round(d.delta, 4), "ci": [round(d.ci_low, 4), round(d.ci_high, 4)],
                            "fixed": p.filter(~pl.col("success") & pl.col("success_cand")).height,
                            "broken": p.filter(pl.col("success") & ~pl.col("success_cand")).height}), flush=True)
