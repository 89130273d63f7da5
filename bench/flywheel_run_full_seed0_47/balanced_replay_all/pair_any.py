"""Pair two eval folders' rollouts by the gate's test, without the code-version check (this session's commits
change no eval path: selection flags, tests, help text)."""
import json, sys
import polars as pl
from flywheel.tasks.release.gate import GateConfig, paired, success_delta
a = pl.read_parquet(f"{sys.argv[1]}/rollouts.parquet"); b = pl.read_parquet(f"{sys.argv[2]}/rollouts.parquet")
p = paired(a, b); d = success_delta(p, GateConfig(seed=0))
fx = p.filter(~pl.col("success") & pl.col("success_cand")); br = p.filter(pl.col("success") & ~pl.col("success_cand"))
tool = {r["task_id"]: r["tool"] for r in a.select("task_id", "tool").iter_rows(named=True)} if "tool" in a.columns else {}
def by(df): 
    out = {}
    for t in df["task_id"]: out[tool.get(t, "?")] = out.get(tool.get(t, "?"), 0) + 1
    return dict(sorted(out.items(), key=lambda x: -x[1]))
print(json.dumps({"start": round(p["success"].mean(), 4), "cand": round(p["success_cand"].mean(), 4),
                  "delta": round(d.delta, 4), "ci": [round(d.ci_low, 4), round(d.ci_high, 4)],
                  "fixed": fx.height, "broken": br.height, "fixed_by_tool": by(fx), "broken_by_tool": by(br)}))
