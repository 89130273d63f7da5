"""Teacher-forced margins (tasks/training/margins.py) on the embedded model with a LoRA adapter: a completion the model
decodes greedily has a positive margin, one token off it a negative one; the shared-prefix pass gives the margins
of one row at a time; the model's training mode is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from flywheel.schemas import Task
from flywheel.tasks.training.margins import _batch, margin_score, reference_margins
from flywheel.tasks.training.replay import encode

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy():
    import torch
    from peft import LoraConfig, get_peft_model

    from flywheel.tasks.inference.models import load_causal_lm, resolve_model

    torch.manual_seed(0)
    model, tokenizer = load_causal_lm(resolve_model(None))
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    return peft.train(), tokenizer


def _tasks(dataset: str, n: int) -> list[Task]:
    import polars as pl

    return [Task.model_validate_json(t) for t in pl.read_parquet(Path(dataset) / "train.parquet")["task"][:n]]


def test_the_margin_says_whether_greedy_decoding_gives_the_completion(policy, tool_dataset) -> None:
    import torch

    model, tokenizer = policy
    rows, off = [], []
    for task in _tasks(tool_dataset, 3):
        ids, scored = encode(tokenizer, task)
        prompt = ids[:scored.index(1)]
        with torch.no_grad():
            out = model.eval().generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                                        dtype=torch.long), do_sample=False, max_new_tokens=10)
            logits = model(input_ids=out[:, :-1]).logits[0, -1]
        greedy = out[0, len(prompt):].tolist()
        second = int(logits.topk(2).indices[1])  # the runner-up for the last token
        rows.append((prompt + greedy, [0] * len(prompt) + [1] * len(greedy)))
        off.append((prompt + greedy[:-1] + [second], rows[-1][1]))
    with torch.no_grad():
        assert all(m > 0 for m in _batch(model, rows))
        assert all(m < 0 for m in _batch(model, off))
    model.train()


@pytest.mark.parametrize("dataset", ["tool_dataset", "workplace_dataset"])
def test_shared_prefix_margins_are_those_of_single_rows(policy, dataset, request) -> None:
    """Single-turn answers, and multi-turn gold episodes (every assistant turn scored, the tool results not)."""
    model, tokenizer = policy
    tasks = _tasks(request.getfixturevalue(dataset), 4)
    together = reference_margins(model, tokenizer, tasks)
    alone = [reference_margins(model, tokenizer, [t])[0] for t in tasks]
    assert model.training  # put back as it was
    assert together == pytest.approx(alone, abs=2e-3)
    assert len(set(together)) == len(tasks)  # per task, not one value
    assert 0 < margin_score(together) < 1
    assert margin_score([m + 1 for m in together]) > margin_score(together)
