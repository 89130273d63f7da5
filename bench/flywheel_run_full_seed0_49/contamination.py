"""python contamination.py DATASET N [GRAM]: how many of the validation slice's tasks (the last N train tasks by id,
carved by ``load_tasks`` as training carves them) share a word GRAM-gram (13 by default) of the user request with a
train task GRPO and SFT train on, and how many held-out tasks do (bench/RESULTS.md, issue 17 item 3)."""
import sys

from flywheel.tasks.training.train import TrainConfig, load_tasks

GRAM = int(sys.argv[3]) if len(sys.argv) > 3 else 13


def grams(text: str) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i:i + GRAM]) for i in range(len(words) - GRAM + 1)}


def requests(split: str) -> list[str]:
    return [t.messages[-1].content or "" for t in load_tasks(config, split)]


config = TrainConfig(dataset=sys.argv[1], out="unused", validation=int(sys.argv[2]), eval_limit=100_000)
fit, val, heldout = requests("train"), requests("validation"), requests("heldout")
seen = set().union(*map(grams, fit))
for name, rows in (("validation", val), ("held-out", heldout)):
    print(f"{name}: {sum(bool(grams(r) & seen) for r in rows)} of {len(rows)} share a {GRAM}-gram with the "
          f"{len(fit)} train tasks")
