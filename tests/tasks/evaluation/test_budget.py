"""The completion cap against the gold answers: a task whose gold answer (single-turn) or one of whose gold calls
(an agent episode) needs more new tokens than the cap is reported, since no policy can solve it under that cap."""

from __future__ import annotations

import polars as pl
from transformers import AutoTokenizer

from flywheel.schemas import Task
from flywheel.tasks.evaluation.budget import gold_turns, over_cap
from flywheel.tasks.inference.models import resolve_model


def _tasks(dataset: str) -> list[Task]:
    return [Task.model_validate_json(t) for t in pl.read_parquet(f"{dataset}/train.parquet")["task"]]


def test_gold_answers_longer_than_the_cap_are_reported(tool_dataset, workplace_dataset) -> None:
    tok = AutoTokenizer.from_pretrained(resolve_model(None))
    for dataset in (tool_dataset, workplace_dataset):
        tasks = _tasks(dataset)
        need = {t.id: max(len(tok(x, add_special_tokens=False)["input_ids"]) for x in gold_turns(t)) + 1
                for t in tasks}
        cap = sorted(need.values())[len(need) // 2]  # the median: some tasks fit, some do not
        over = over_cap(tasks, tok, cap)
        assert over and set(over) == {i for i, n in need.items() if n > cap} and len(over) < len(tasks)
        assert over_cap(tasks, tok, max(need.values())) == []  # the longest answer plus its end token fits
        assert over_cap(tasks, tok, max(need.values()) - 1) != []
    episode = next(t for t in _tasks(workplace_dataset) if len(t.reference.calls) > 1)
    assert len(gold_turns(episode)) == len(episode.reference.calls)  # an agent's cap is per turn, not per episode
