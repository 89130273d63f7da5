"""Helpers every verifier shares: TRL's column values to Tasks and texts, and the batch reward loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas import Task, Verdict


def as_task(value: Any) -> Task:
    if isinstance(value, Task):
        return value
    if isinstance(value, str):
        return Task.model_validate_json(value)
    return Task.model_validate(value)


def as_text(completion: Any) -> str:
    """TRL passes plain strings, or message lists in conversational datasets."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


def batch_rewards(env: str, verify: Callable[[Task, str], Verdict], completions: list[Any],
                  tasks: list[Any]) -> list[float | None]:
    """TRL's reward-function contract: one float per completion, None where the verifier does not apply
    (another env) or could not score (valid=False)."""
    rewards: list[float | None] = []
    for completion, raw in zip(completions, tasks, strict=True):
        task = as_task(raw)
        rewards.append(verify(task, as_text(completion)).reward if task.env == env else None)
    return rewards


def guarded_verify(name: str, version: str, score: Callable[[Task, str], Verdict], task: Task,
                   completion: str) -> Verdict:
    """Run a verifier's scoring; a crash of the verifier itself becomes valid=False data, never reward 0."""
    try:
        return score(task, completion)
    except Exception as err:  # the verifier failed, not the sample: report it as data, keep the run going
        return Verdict(reward=None, valid=False, failure_class="verifier_error", details=f"{type(err).__name__}: {err}",
                       verifier=name, verifier_version=version)
