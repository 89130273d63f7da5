"""Does the completion cap leave room for the right answer? A gold completion longer than ``max_tokens`` (or, in an
agent episode, a gold call longer than the per-turn cap) is cut, so its task cannot be solved however good the model:
a cap of 64 tokens silently made about 9% of tool_call held-out tasks unsolvable.

Contract: ``over_cap(tasks, tokenizer, cap)`` -> the ids of the tasks whose gold answer needs more than ``cap`` new
tokens (the answer's tokens plus the end-of-sequence token the policy must also write). Single-turn: the env's
``reference_completion``; multi-turn: each reference call as the agent writes it (``{"tool", "args"}`` JSON).
"""

from __future__ import annotations

import json
from typing import Any

from flywheel.schemas import Task
from flywheel.verifiers.envs import get_env


def gold_turns(task: Task) -> list[str]:
    spec = get_env(task.env)
    if not spec.multi_turn:
        return [spec.reference_completion(task)]
    return [json.dumps({"tool": c.tool, "args": c.args}) for c in task.reference.calls]


def over_cap(tasks: list[Task], tokenizer: Any, cap: int) -> list[str]:
    return [t.id for t in tasks
            if any(len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1 > cap for text in gold_turns(t))]
