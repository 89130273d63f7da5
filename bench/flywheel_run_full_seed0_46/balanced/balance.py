"""python balance.py RUN OUT.parquet: RUN's curriculum picks balanced by decision (bench/RESULTS.md, issue 17).

Within each tool, the picks whose reference calls set the same argument keys are one side of a decision; every side
keeps as many picks as the rarest side has (the first by task id), the rest are marked "always" so that GRPO skips
them (`bench/tool_call_grpo_replay_step/run.py RUN OUT skip_tasks=OUT.parquet`)."""
import json
import sys

import polars as pl

run, out = sys.argv[1], sys.argv[2]
recipe = json.loads(open(f"{run}/grpo/train_config.json", encoding="utf-8").read())
marks = pl.read_parquet(recipe["skip_tasks"])
train = pl.read_parquet(f"{recipe['dataset']}/train.parquet").select("id", "tool", "task")
side = {r["id"]: (r["tool"], ",".join(sorted(json.loads(r["task"])["reference"]["calls"][0]["args"])))
        for r in train.iter_rows(named=True)}
picks = sorted(i for i, m in zip(marks["task_id"], marks["mark"]) if m != "always")
by_tool: dict[str, dict[str, list[str]]] = {}
for i in picks:
    by_tool.setdefault(side[i][0], {}).setdefault(side[i][1], []).append(i)
drop: set[str] = set()
for tool, sides in by_tool.items():
    if len(sides) > 1:
        n = min(len(v) for v in sides.values())
        for v in sides.values():
            drop.update(v[n:])
        print(tool, {s: len(v) for s, v in sides.items()}, "->", n)
dropped = pl.col("task_id").is_in(pl.Series(sorted(drop), dtype=pl.Utf8).implode())
marks.with_columns(pl.when(dropped).then(pl.lit("always")).otherwise(pl.col("mark")).alias("mark")).write_parquet(out)
print(len(picks), "picks ->", len(picks) - len(drop))
