"""Score ``{"task", "completion"}`` records with a verifier (``flywheel score`` and ``profile-reward``).

Contract: :func:`score_lines` takes numbered JSONL lines (bytes) and a line parser, and returns the scored records
(each input object plus ``"verdict"``) and the malformed lines as ``(line number, exception)``; a malformed line
never stops the others. Tasks repeated across lines (k samples, GRPO groups) are parsed once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson
from pydantic import ValidationError

from flywheel.schemas import Task

TASK_CACHE = 50_000  # parsed tasks kept at once


def verdict_record(v: Any) -> dict[str, Any]:
    """A Verdict as the ``"verdict"`` object written beside each scored line."""
    return {"reward": v.reward, "valid": v.valid, "failure_class": v.failure_class, "components": v.components,
            "details": v.details, "verifier": v.verifier, "verifier_version": v.verifier_version}


def score_lines(module: Any, rows: Iterable[tuple[int, bytes]], parse: Callable[[bytes], Any],
                ) -> tuple[list[dict[str, Any]], list[tuple[int, Exception]]]:
    """Scored records and malformed lines (number, error) for ``rows``; ``module.verify(task, completion)``
    scores each line (a list completion, a trajectory, is passed as its JSON text)."""
    out: list[dict[str, Any]] = []
    bad: list[tuple[int, Exception]] = []
    tasks: dict[bytes, Task] = {}
    for lineno, line in rows:
        try:
            record = parse(line)
            if not isinstance(record, dict) or "task" not in record \
                    or not isinstance(record.get("completion"), (str, list)):
                raise ValueError('expected an object with "task" (Task JSON) and "completion" (a string, or a list of '
                                 'chat messages: a trajectory)')
            key = orjson.dumps(record["task"], option=orjson.OPT_SORT_KEYS)
            task = tasks.get(key)
            if task is None:
                task = tasks[key] = Task.model_validate(record["task"])
                if len(tasks) > TASK_CACHE:
                    tasks.clear()
        except (ValueError, ValidationError) as exc:
            bad.append((lineno, exc))
            continue
        completion = record["completion"]
        record["verdict"] = verdict_record(module.verify(task, completion if isinstance(completion, str)
                                                         else orjson.dumps(completion).decode()))
        out.append(record)
    return out, bad
