"""Mark mixed picks 'always' so that within each tool every reference arg-key signature has as many picks as the rarest."""
import json, sys
import polars as pl
run, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{run}/grpo/train_config.json"))
p = pl.read_parquet(cfg["skip_tasks"])
tr = pl.read_parquet(f"{cfg['dataset']}/train.parquet").select("id", "tool", "task")
sig = {r["id"]: (r["tool"], ",".join(sorted(json.loads(r["task"])["reference"]["calls"][0]["args"]))) for r in tr.iter_rows(named=True)}
picks = [i for i, m in zip(p["task_id"], p["mark"]) if m != "always"]
by = {}
for i in sorted(picks):
    by.setdefault(sig[i][0], {}).setdefault(sig[i][1], []).append(i)
drop = set()
for tool, sides in by.items():
    if len(sides) > 1:
        n = min(len(v) for v in sides.values())
        for s, v in sides.items():
            drop.update(v[n:])
        print(tool, {s: len(v) for s, v in sides.items()}, "->", n)
p = p.with_columns(pl.when(pl.col("task_id").is_in(list(drop))).then(pl.lit("always")).otherwise(pl.col("mark")).alias("mark"))
p.write_parquet(out)
print(len(picks), "picks ->", len(picks) - len(drop))
