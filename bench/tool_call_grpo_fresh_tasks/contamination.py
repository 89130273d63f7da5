"""B's train rows that share a 13-gram with, or are near duplicates of, A's held-out rows: ids to exclude.
python contamination.py A/heldout.parquet B/train.parquet OUT.txt"""
import sys

import polars as pl

from flywheel.tasks.data.dedupe import NearDupParams
from flywheel.tasks.data.split import contamination

a_held, b_train, out = sys.argv[1:4]
ah = pl.read_parquet(a_held)
bt = pl.read_parquet(b_train).sort("id")
flags = contamination(ah["prompt"].to_list(), bt["prompt"].to_list(), NearDupParams())
bad = [i for i, f in zip(bt["id"].to_list(), flags, strict=True) if f]
print(len(bad), "of", bt.height, "B train rows touch A's held-out;",
      sum(1 for f in flags[-128:] if f), "in B's last 128 (validation)")
for i, f in zip(bt["id"].to_list(), flags, strict=True):
    if f:
        print(" ", i[:12], f)
with open(out, "w", encoding="utf-8") as fh:
    fh.write("\n".join(bad) + "\n")
