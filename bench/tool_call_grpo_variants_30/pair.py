"""Pair candidate evals with a base eval by the gate's test: python pair.py BASE_EVAL CAND_EVAL... prints each
candidate's success, its delta over BASE with the paired 95% interval, and the tasks fixed and broken by tool."""
import sys

import polars as pl

from flywheel.flows.promote import load_evals
from flywheel.tasks.release.gate import GateConfig, paired, success_delta

for cand in sys.argv[2:]:
    _, a, _, b = load_evals(sys.argv[1], cand)
    p = paired(a, b)
    d = success_delta(p, GateConfig(seed=0))
    fixed = p.filter(~pl.col("success") & pl.col("success_cand"))
    broken = p.filter(pl.col("success") & ~pl.col("success_cand"))
    print(cand, round(p["success"].mean(), 4), round(p["success_cand"].mean(), 4), round(d.delta, 4),
          [round(d.ci_low, 4), round(d.ci_high, 4)], "fixed", fixed.height, "broken", broken.height)
    for name, rows in (("fixed", fixed), ("broken", broken)):
        print(" ", name, rows["tool"].value_counts().sort("count", descending=True).rows()[:6])
