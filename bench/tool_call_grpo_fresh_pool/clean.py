"""A copy of a fresh dataset version without the train rows that touch the gate's held-out tasks (a word 13-gram
or a near duplicate, the split's own check), so neither GRPO, its replay nor its validation slice sees them
(bench/RESULTS.md, "GRPO on a fresh pool of phrasings").
python clean.py GATE_VERSION FRESH_VERSION OUT_VERSION"""
import json
import shutil
import sys
from pathlib import Path

import polars as pl

from flywheel.tasks.data.dedupe import NearDupParams
from flywheel.tasks.data.publish import content_hash, file_sha256
from flywheel.tasks.data.split import contamination

gate, fresh, out = map(Path, sys.argv[1:4])
held = pl.read_parquet(gate / "heldout.parquet")["prompt"].to_list()
train = pl.read_parquet(fresh / "train.parquet")
flags = contamination(held, train["prompt"].to_list(), NearDupParams())
kept = train.filter(pl.Series([not f for f in flags]))
shutil.copytree(fresh, out)
kept.write_parquet(out / "train.parquet")
manifest = json.loads((fresh / "manifest.json").read_text(encoding="utf-8"))
manifest["files"]["train.parquet"] = file_sha256(out / "train.parquet")
manifest["counts"]["train"] = kept.height
manifest["content_hash"] = content_hash(manifest["files"])
(out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
print(train.height - kept.height, "of", train.height, "train rows dropped;", kept.height, "kept")
