"""Pair two eval folders' rollouts by the gate's test, without the code-version check (this session's commits
change no eval path: selection flags, tests, help text)."""
import json
import sys

import polars as pl

from flywheel.tasks.release.gate import GateConfig, paired, success_delta


def by_tool(df: pl.DataFrame, tool: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for task_id in df["task_id"]:
        name = tool.get(task_id, "?")
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items(), key=lambda x: -x[1]))


def main(start_dir: str, cand_dir: str) -> None:
    a = pl.read_parquet(f"{start_dir}/rollouts.parquet")
    b = pl.read_parquet(f"{cand_dir}/rollouts.parquet")
    p = paired(a, b)
    d = success_delta(p, GateConfig(seed=0))
    fixed = p.filter(~pl.col("success") & pl.col("success_cand"))
    broken = p.filter(pl.col("success") & ~pl.col("success_cand"))
    rows = a.select("task_id", "tool").iter_rows(named=True) if "tool" in a.columns else []
    tool = {r["task_id"]: r["tool"] for r in rows}
    print(json.dumps({"start": round(p["success"].mean(), 4), "cand": round(p["success_cand"].mean(), 4),
                      "delta": round(d.delta, 4), "ci": [round(d.ci_low, 4), round(d.ci_high, 4)],
                      "fixed": fixed.height, "broken": broken.height,
                      "fixed_by_tool": by_tool(fixed, tool), "broken_by_tool": by_tool(broken, tool)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
