"""Bench: where a workplace SFT adapter goes wrong, under teacher forcing. For each failed episode of an eval on
a workplace dataset, the task's gold episode is rendered as SFT trains on it (``sft_row``) and the adapter's
argmax is compared with the gold token at every assistant position: the positions it gets wrong, with the text
before them and what it predicted instead. If they are the points where the eval's trajectory left the gold one,
the eval renders episodes as training does and the model is underfit on those tokens (not a rendering mismatch).

Run: .venv/bin/python bench/scripts/workplace_decision_tokens.py EVAL_DIR DATASET_DIR SPLIT ADAPTER [N]
(EVAL_DIR: a ``flywheel eval`` output on SPLIT of DATASET_DIR with ADAPTER; prints N failed tasks, default 6)
"""

from __future__ import annotations

import sys

import polars as pl
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from flywheel.schemas import Task
from flywheel.tasks.inference.models import embedded_checkpoint
from flywheel.tasks.training.episodes import sft_row


def wrong_positions(model: object, tokenizer: object, task: Task) -> list[tuple[str, str]]:
    row = sft_row(tokenizer, task)
    ids = torch.tensor([row["input_ids"]])
    with torch.no_grad():
        predicted = model(ids).logits[0].argmax(-1)
    return [(tokenizer.decode(ids[0, max(0, i - 4):i + 1]), tokenizer.decode([int(predicted[i - 1])]))
            for i in range(1, ids.shape[1]) if row["assistant_masks"][i] and predicted[i - 1] != ids[0, i]]


def main(eval_dir: str, dataset: str, split: str, adapter: str, n: int = 6) -> None:
    rollouts = pl.read_parquet(f"{eval_dir}/rollouts.parquet")
    tasks = pl.read_parquet(f"{dataset}/{split}.parquet").select("id", "seed_id", "task")
    failed = rollouts.join(tasks, left_on="task_id", right_on="id").filter(pl.col("success") == 0)
    tokenizer = AutoTokenizer.from_pretrained(embedded_checkpoint())
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(embedded_checkpoint()), adapter).eval()
    print(f"{failed.height} of {rollouts.height} episodes failed")
    for row in failed.head(n).iter_rows(named=True):
        task = Task.model_validate_json(row["task"]) if isinstance(row["task"], str) else Task.model_validate(
            row["task"])
        print(row["seed_id"], row["failure_class"], "| wrong under teacher forcing (gold ... -> predicted):",
              wrong_positions(model, tokenizer, task))


if __name__ == "__main__":
    main(*sys.argv[1:5], *[int(a) for a in sys.argv[5:6]])
