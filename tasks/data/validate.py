"""Stage 3: validate rows: the Task schema, the reference arguments against the
tool's JSON Schema, and the reference call must score 1.0 under its verifier.

Contract: pure; returns (kept, rejects) with one reason per reject.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from flywheel.schemas import Task
from flywheel.tasks.data.generate import reject_row
from flywheel.verifiers.envs import get_env


def reference_completion(task: Task) -> str:
    """What a perfect policy answers (the env's ``reference_completion``)."""
    return get_env(task.env).reference_completion(task)


def check_row(row: dict[str, Any]) -> tuple[str, str] | None:
    """None when the row is valid, else (reason, detail)."""
    try:
        task = Task.model_validate_json(row["task"])
    except ValidationError as err:
        return "schema_invalid", str(err.errors()[0])[:300]
    if task.id != row["id"]:
        return "id_mismatch", f"row id {row['id'][:12]} != task id {task.id[:12]}"
    try:
        spec = get_env(task.env)
    except ValueError as err:
        return "unknown_env", str(err)[:300]
    return spec.check_reference(task)


def validate_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    kept, rejects = [], []
    for row in rows:
        problem = check_row(row)
        if problem is None:
            kept.append(row)
        else:
            rejects.append(reject_row(row, "validate", *problem))
    return kept, rejects
