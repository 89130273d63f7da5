"""python rescore.py DATASET EVAL...: each eval's rollouts re-scored by the tool_call verifier of this checkout;
prints the verdicts that moved (bench/RESULTS.md, forty-fifth session)."""
import json
import sys

import polars as pl

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import load_split
from flywheel.verifiers.envs.tool_call import tool_call

tasks, _, _ = load_split(EvalConfig(dataset=sys.argv[1], out="/tmp/unused", limit=1000))
by_id = {t.id: t for t in tasks}
for folder in sys.argv[2:]:
    rows = pl.read_parquet(f"{folder}/rollouts.parquet").select("task_id", "completion", "reward", "failure_class")
    moved = []
    for r in rows.iter_rows(named=True):
        v = tool_call.verify(by_id[r["task_id"]], r["completion"])
        if (v.reward, v.failure_class) != (r["reward"], r["failure_class"]):
            moved.append({"task": r["task_id"][:12], "was": [r["reward"], r["failure_class"]],
                          "now": [v.reward, v.failure_class], "completion": r["completion"]})
    print(folder, json.dumps({"rollouts": rows.height, "moved": moved}))
