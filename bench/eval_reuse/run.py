"""GRPO's kept start adapter evaluated by copying SFT's batches (``EvalConfig.reuse``), against running it.

Usage: ``python bench/eval_reuse/run.py RUN OUT``: RUN is a finished ``flywheel run --profile full`` whose GRPO stage
kept its start adapter (``RUN/grpo/adapter`` holds SFT's weights), OUT a new folder. Evaluates ``RUN/sft/adapter``
on the run's held-out tasks (as the run's SFT eval did), then ``RUN/grpo/adapter`` with ``reuse`` pointing at that
eval; compares both with the run's own GRPO eval (``RUN/grpo/eval``, which ran) and writes ``OUT/result.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import polars as pl

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import run_eval
from flywheel.schemas import EvalReport

run, out = Path(sys.argv[1]), Path(sys.argv[2])
ran = EvalReport.model_validate_json((run / "grpo" / "eval" / "report.json").read_text())
common = {"dataset": ran.dataset["path"], "limit": ran.n_tasks, "seed": ran.seed, "temperature": 0.0,
          "max_tokens": ran.sampling["max_tokens"], "backend": "auto"}
timing = {}
for name, reuse in (("sft", ()), ("grpo", (str(out / "sft"),))):
    t0 = time.perf_counter()
    run_eval(EvalConfig(out=str(out / name), model=str(run / name / "adapter"), reuse=reuse, **common))
    timing[name] = round(time.perf_counter() - t0, 1)
stable = ["task_id", "sample", "seed", "completion", "success", "unsafe", "completion_tokens"]
frames = {k: pl.read_parquet(p).select(stable).sort(stable[:3]) for k, p in
          (("run", run / "grpo" / "eval" / "rollouts.parquet"), ("copied", out / "grpo" / "rollouts.parquet"))}
report = EvalReport.model_validate_json((out / "grpo" / "report.json").read_text())
result = {"run": str(run), "tasks": ran.n_tasks, "sft_eval_s": timing["sft"], "grpo_eval_copied_s": timing["grpo"],
          "grpo_eval_in_run_rollouts_s": ran.timings.get("rollouts_s"), "batches": report.batches,
          "same_rollouts_as_the_run": frames["run"].equals(frames["copied"]),
          "success": report.metrics["success_rate"].value}
(out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
