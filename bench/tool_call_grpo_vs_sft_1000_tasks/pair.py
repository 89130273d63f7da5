"""SFT against GRPO on every task of a fresh dataset neither trained on (both splits), by the gate's paired test.
python pair.py ROOT A B [EXCLUDE]: ROOT/A-train, ROOT/A-heldout, ROOT/B-train, ROOT/B-heldout are `flywheel eval`
folders of the same dataset, seed and decoding; EXCLUDE: a file of task ids (one a line) left out of the pair."""
import json
import sys
from pathlib import Path

import polars as pl

from flywheel.flows.promote import _load_eval
from flywheel.tasks.release.gate import GateConfig, paired, success_delta

root, a_name, b_name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
drop = Path(sys.argv[4]).read_text(encoding="utf-8").split() if len(sys.argv) > 4 else []
out = {}
for name, splits in (("train", ["train"]), ("heldout", ["heldout"]), ("both", ["train", "heldout"])):
    a = pl.concat([_load_eval(root / f"{a_name}-{s}", "--baseline-eval")[1] for s in splits])
    b = pl.concat([_load_eval(root / f"{b_name}-{s}", "--candidate-eval")[1] for s in splits])
    p = paired(a.filter(~pl.col("task_id").is_in(drop)), b.filter(~pl.col("task_id").is_in(drop)))
    d = success_delta(p, GateConfig(seed=0))
    out[name] = {"tasks": p.height, "start": round(p["success"].mean(), 4), "grpo": round(p["success_cand"].mean(), 4),
                 "delta": round(d.delta, 4), "ci": [round(d.ci_low, 4), round(d.ci_high, 4)],
                 "fixed": p.filter(~pl.col("success") & pl.col("success_cand")).height,
                 "broken": p.filter(pl.col("success") & ~pl.col("success_cand")).height}
print(json.dumps(out, indent=1))
