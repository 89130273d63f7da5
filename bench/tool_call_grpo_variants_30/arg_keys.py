"""How many greedy calls name fewer or more argument keys than the base eval's for the same task:
python arg_keys.py BASE_EVAL CAND_EVAL... (rollouts.parquet of each; unparseable completions are skipped)."""
import json
import sys

import polars as pl


def keys(completion: str) -> set[str] | None:
    try:
        return set(json.loads(completion).get("args") or {})
    except (ValueError, AttributeError):
        return None


base = pl.read_parquet(sys.argv[1] + "/rollouts.parquet").select("task_id", "completion")
for cand in sys.argv[2:]:
    other = pl.read_parquet(cand + "/rollouts.parquet").select("task_id", pl.col("completion").alias("cand"))
    fewer = more = 0
    for a, b in base.join(other, on="task_id").select("completion", "cand").iter_rows():
        ka, kb = keys(a), keys(b)
        if ka is not None and kb is not None:
            fewer += len(kb) < len(ka)
            more += len(kb) > len(ka)
    print(cand, "fewer", fewer, "more", more)
