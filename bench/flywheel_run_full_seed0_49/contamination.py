"""python contamination.py DATASET N [GRAM]: how many of the validation slice's tasks (the last N train rows, as
``TrainConfig.validation`` carves them) share a word GRAM-gram (13 by default) of the prompt with a train row GRPO
and SFT train on, and how many held-out tasks do (bench/RESULTS.md, issue 17 item 3)."""
import sys

import polars as pl

GRAM = int(sys.argv[3]) if len(sys.argv) > 3 else 13


def grams(text: str) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i:i + GRAM]) for i in range(len(words) - GRAM + 1)}


def overlapping(rows: pl.DataFrame, seen: set[tuple[str, ...]]) -> int:
    return sum(bool(grams(p) & seen) for p in rows["prompt"])


data, n = sys.argv[1], int(sys.argv[2])
train = pl.read_parquet(f"{data}/train.parquet")
heldout = pl.read_parquet(f"{data}/heldout.parquet")
fit, val = train.head(train.height - n), train.tail(n)
fit_grams = set().union(*(grams(p) for p in fit["prompt"]))
print(f"validation {overlapping(val, fit_grams)} of {val.height} share a {GRAM}-gram with the {fit.height} train rows")
print(f"held-out {overlapping(heldout, fit_grams)} of {heldout.height} share one with the train rows")
