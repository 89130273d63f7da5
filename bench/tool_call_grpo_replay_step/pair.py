"""python pair.py START_EVAL EVAL...: each eval folder paired with START_EVAL by the gate's test."""
import json
import sys

import polars as pl

from flywheel.flows.promote import load_evals
from flywheel.tasks.release.gate import GateConfig, paired, success_delta

for b in sys.argv[2:]:
    _, x, _, y = load_evals(sys.argv[1], b)
    p = paired(x, y)
    d = success_delta(p, GateConfig(seed=0))
    print(b, json.dumps({"start": round(p["success"].mean(), 4), "cand": round(p["success_cand"].mean(), 4),
                         "delta": round(d.delta, 4), "ci": [round(d.ci_low, 4), round(d.ci_high, 4)],
                         "fixed": p.filter(~pl.col("success") & pl.col("success_cand")).height,
                         "broken": p.filter(pl.col("success") & ~pl.col("success_cand")).height}))
