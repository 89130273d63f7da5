"""GRPO from one start adapter, paired against its greedy held-out eval (bench/RESULTS.md, issue 17):
GX_DATASET=D GX_ROOT=R python grpo_experiment.py NAME START_ADAPTER STEPS PROMPTS LR TEMP CURRIC_TASKS
Writes R/NAME; reuses R/greedy_<adapter folder name> and R/curr_<name>_<tasks> when present (symlink a run's sft/eval
and curriculum there to pair with them). GX_REWARD: success (default) or verifier. GX_BETA: the KL coefficient
(default 0; above 0 it anchors on START_ADAPTER). GX_REPLAY: the SFT replay weight (default 0; GX_REPLAY_ROWS
reference answers per step, default 16; GX_REPLAY_FOCUS all or tools). GX_BACKEND: the evals' backend (default
transformers, as the evals it pairs with were made; one backend for both sides of a pair). GX_SEED: GRPO's seed
(default 0). GX_EVAL_SEED: the held-out eval's seed (default 0; a `flywheel run --seed S` evaluated with S, and a
greedy pair needs the same (task, sample, seed) keys). GX_VALIDATION: validation tasks (default 32). GX_INTERVAL:
steps between checks (default STEPS // 4). GX_ROLLOUT: GRPO's rollout backend (default transformers).
GX_CURRICULUM=failures: instead of K samples of the first CURRIC_TASKS train tasks, one greedy answer to each of
them, and GRPO trains on those the start adapter fails (the decisions greedy decoding gets wrong; flat groups are
redrawn among them); GX_CURRICULUM=both: those and the tasks mixed in 4 samples at temperature 1.
GX_EVAL_DATASET: the dataset whose held-out tasks the two evals read (default GX_DATASET): GRPO on a fresh
dataset's train tasks, judged on the start's own held-out. GX_EXCLUDE: a file of task ids (one a line) GRPO never
trains on (with GX_CURRICULUM failures or both): e.g. the fresh rows that share a 13-gram with those held-out tasks."""
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

name, start, steps, prompts, lr, temp, ct = sys.argv[1:8]
steps, prompts, lr, temp, ct = int(steps), int(prompts), float(lr), float(temp), int(ct)
DS = os.environ["GX_DATASET"]
EVAL_DS = os.environ.get("GX_EVAL_DATASET", DS)
BACKEND = os.environ.get("GX_BACKEND", "transformers")
ROOT = Path(os.environ.get("GX_ROOT", "/tmp/gx"))
out = ROOT / name
tag = Path(start).name
base = ROOT / f"greedy_{tag}"
curr = ROOT / f"curr_{tag}_{ct}"
t0 = time.time()
if not (base / "report.json").exists():
    eval_policy(EvalConfig(dataset=EVAL_DS, out=str(base), model=start, limit=200, max_tokens=96, temperature=0.0,
                           seed=int(os.environ.get("GX_EVAL_SEED", "0")), backend=BACKEND))  # both sides: one seed
BOTH = os.environ.get("GX_CURRICULUM") == "both"  # the greedy failures and the mixed tasks at temperature 1
FAILURES = os.environ.get("GX_CURRICULUM") == "failures" or BOTH
mixed = curr
if FAILURES:
    curr = ROOT / f"fail_{tag}_{ct}"
for folder, greedy in ((curr, FAILURES), *(((mixed, False),) if BOTH else ())):
    if not (folder / "per_task.parquet").exists():
        eval_policy(EvalConfig(dataset=DS, split="train", out=str(folder), model=start, samples=1 if greedy else 4,
                               temperature=0.0 if greedy else 1.0, limit=ct, seed=0, max_tokens=96, backend=BACKEND))
skip = curr / "per_task.parquet"
if FAILURES:  # train on the greedy failures: mark them "mixed" (kept), the solved ones "always" (skipped)
    import polars as pl

    from flywheel.tasks.training.train import union_marks

    if BOTH:  # a task kept by either: failed greedily, or mixed at temperature 1 (flywheel run --curriculum both)
        skip = union_marks(str(skip), str(mixed / "per_task.parquet"), curr / "train_on_both.parquet")
    marks = pl.read_parquet(skip, columns=["task_id", "mark"])
    if os.environ.get("GX_EXCLUDE"):  # never trained on, whatever the curriculum said
        out_ids = Path(os.environ["GX_EXCLUDE"]).read_text(encoding="utf-8").split()
        marks = marks.with_columns(mark=pl.when(pl.col("task_id").is_in(out_ids)).then(pl.lit("always"))
                                   .otherwise(pl.col("mark")))
    skip = curr / ("train_on_both.parquet" if BOTH else "train_on_failures.parquet")
    marks.with_columns(mark=pl.when(pl.col("mark") == "always").then(pl.lit("always")).otherwise(pl.lit("mixed"))
                       ).write_parquet(skip)
    print("trained on", marks.filter(pl.col("mark") != "always").height, "of", marks.height, flush=True)
t1 = time.time()
cfg = TrainConfig(dataset=DS, out=str(out), method="grpo", model=start, skip_tasks=str(skip),
                  limit=ct, max_steps=steps, batch_size=8 * prompts, micro_batch=8, learning_rate=lr,
                  num_generations=8, loss_type="dapo", refill=2, max_completion_length=96, eval_limit=200,
                  eval_interval=int(os.environ.get("GX_INTERVAL", max(1, steps // 4))),
                  validation=int(os.environ.get("GX_VALIDATION", "32")),
                  save_steps=max(1, steps // 4),
                  seed=int(os.environ.get("GX_SEED", "0")),
                  rollout_backend=os.environ.get("GX_ROLLOUT", "transformers"),
                  temperature=temp, reward=os.environ.get("GX_REWARD", "success"),
                  beta=float(os.environ.get("GX_BETA", "0")), replay_weight=float(os.environ.get("GX_REPLAY", "0")),
                  replay_rows=int(os.environ.get("GX_REPLAY_ROWS", "16")),
                  replay_focus=os.environ.get("GX_REPLAY_FOCUS", "all"))
ev = EvalConfig(dataset=EVAL_DS, out=str(out / "eval"), limit=200, seed=int(os.environ.get("GX_EVAL_SEED", "0")),
                max_tokens=96, temperature=0.0, backend=BACKEND)  # GX_EVAL_SEED: a flywheel run's --seed, to pair
res = train_policy(cfg, ev)
t2 = time.time()
_, a, _, b = load_evals(str(base), str(out / "eval"))
d = success_delta(paired(a, b), GateConfig(seed=0))
print("RESULT", json.dumps({"name": name, "prep_s": round(t1 - t0), "train_eval_s": round(t2 - t1),
                  "selected": res.selected_step, "success": res.metrics["success_rate"].value,
                  "base": json.load(open(base / "report.json"))["metrics"]["success_rate"]["value"],
                  "delta": d.delta, "ci": [d.ci_low, d.ci_high]}))
