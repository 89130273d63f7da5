"""The "room" curriculum of bench/RESULTS.md ("GRPO on the least-solved train tasks"): from a `flywheel run --profile
full` folder's two curriculum evals, mark "mixed" (GRPO trains on it) each train task the greedy eval got wrong or
the K=4 samples solved at most twice, the rest "always"; the file goes to `run.py ... skip_tasks=OUT`.
python marks.py RUN OUT"""
import sys
from pathlib import Path

import polars as pl

run, out = Path(sys.argv[1]), sys.argv[2]
sampled = pl.read_parquet(run / "curriculum-sampled" / "per_task.parquet").select("task_id", sampled="successes")
greedy = pl.read_parquet(run / "curriculum" / "per_task.parquet").select("task_id", greedy="successes")
room = (pl.col("greedy") == 0) | (pl.col("sampled") <= 2)
marks = sampled.join(greedy, on="task_id").select(
    "task_id", mark=pl.when(room).then(pl.lit("mixed")).otherwise(pl.lit("always")))
marks.sort("task_id").write_parquet(out)
print(marks.group_by("mark").len().sort("mark").rows())
