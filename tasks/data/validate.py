"""Stage 3: validate rows: the Task schema, the reference arguments against the
tool's JSON Schema, and the reference call must score 1.0 under its verifier.

Contract: pure; returns (kept, rejects) with one reason per reject.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from flywheel.schemas import Task
from flywheel.tasks.data.generate import reject_row
from flywheel.verifiers import get_verifier
from flywheel.verifiers.tool_checks import schema_errors
from flywheel.verifiers.workplace import trajectory_from_calls


def reference_completion(task: Task) -> str:
    """What a perfect policy answers: the reference call as JSON, the boxed answer, the command, the reference
    solution in a fence, or the gold trajectory."""
    if task.env == "math":
        return f"\\boxed{{{task.reference.answer}}}"
    if task.env == "code":
        return f"```python\n{task.reference.answer}```"
    if task.env == "workplace":
        return json.dumps(trajectory_from_calls(task.reference.calls))
    if task.env != "tool_call":
        return task.reference.answer or ""
    call = task.reference.calls[0]
    return json.dumps({"tool": call.tool, "args": call.args}, ensure_ascii=False)


def check_row(row: dict[str, Any]) -> tuple[str, str] | None:
    """None when the row is valid, else (reason, detail)."""
    try:
        task = Task.model_validate_json(row["task"])
    except ValidationError as err:
        return "schema_invalid", str(err.errors()[0])[:300]
    if task.id != row["id"]:
        return "id_mismatch", f"row id {row['id'][:12]} != task id {task.id[:12]}"
    if task.env == "tool_call":
        if len(task.reference.calls) != 1:
            return "bad_reference", f"{len(task.reference.calls)} reference calls, expected 1"
        call = task.reference.calls[0]
        spec = task.tool(call.tool)
        if spec is None:
            return "bad_reference", f"reference tool {call.tool!r} is not offered"
        errors = schema_errors(spec, call.args)
        if errors:
            return "args_schema_violation", "; ".join(errors)[:300]
    verdict = get_verifier(task.env).verify(task, reference_completion(task))
    if verdict.reward != 1.0:
        return "reference_not_full_reward", f"reward {verdict.reward} ({verdict.failure_class}): {verdict.details}"[:300]
    return None


def validate_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    kept, rejects = [], []
    for row in rows:
        problem = check_row(row)
        if problem is None:
            kept.append(row)
        else:
            rejects.append(reject_row(row, "validate", *problem))
    return kept, rejects
