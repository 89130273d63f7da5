"""python bench/scripts/fixed_broken.py START_EVAL CAND_EVAL: fixed/broken counts by tool, paired as the gate pairs."""

import json
import sys

import polars as pl

from flywheel.flows.promote import load_evals
from flywheel.tasks.release.gate import GateConfig, paired, success_delta

_, x, _, y = load_evals(sys.argv[1], sys.argv[2])
p = paired(x, y)
d = success_delta(p, GateConfig(seed=0))
fx = p.filter(~pl.col("success") & pl.col("success_cand"))
br = p.filter(pl.col("success") & ~pl.col("success_cand"))
ci = [round(d.ci_low, 4), round(d.ci_high, 4)]
print(json.dumps({"delta": round(d.delta, 4), "ci": ci, "fixed": fx.height, "broken": br.height}))
for name, t in (("fixed", fx), ("broken", br)):
    print(name, dict(t.group_by("tool").len().sort(["len", "tool"], descending=[True, False]).iter_rows()))
