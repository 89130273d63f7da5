"""Curriculum marks: which train tasks GRPO trains on, from evals of the start policy on the train split
(``per_task.parquet``'s ``mark``: always / never / mixed). Used by ``TrainConfig`` (``--skip-tasks``) and by
``flywheel run``'s curriculum (flows/pipeline.py)."""

from __future__ import annotations

from pathlib import Path

from flywheel.schemas import Task


def skip_ids(path: str, train_on: str = "mixed") -> set[str]:
    """Task ids to leave out by an eval on the train split (its per_task.parquet's ``mark``): all but the mixed ones,
    or, ``train_on="failures"``, the always solved ones."""
    import polars as pl

    try:
        marks = pl.read_parquet(path, columns=["task_id", "mark"])
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"--skip-tasks {path} is not a per_task.parquet with task_id and mark columns ({first}); "
                         "pass the per_task.parquet of `flywheel eval --split train --samples K`") from None
    kept = ["mixed", "never"] if train_on == "failures" else ["mixed"]
    return set(marks.filter(~pl.col("mark").is_in(kept))["task_id"].to_list())


def union_marks(greedy: str, sampled: str, out: Path) -> Path:
    """``flywheel run --curriculum both``: one per_task file marking "mixed" each task a greedy eval got wrong or K
    samples solved only some of the time, the others "always" (so both ``train_on`` values keep the same tasks)."""
    import io

    import polars as pl

    from flywheel.tasks.files import write_bytes_atomic

    first = pl.read_parquet(greedy, columns=["task_id", "mark"])
    second = pl.read_parquet(sampled, columns=["task_id", "mark"]).rename({"mark": "sampled"})
    if sorted(first["task_id"]) != sorted(second["task_id"]):
        raise ValueError(f"{greedy} and {sampled} mark different tasks: the two curriculum evals must cover the same")
    either = (pl.col("mark") == "never") | (pl.col("sampled") == "mixed")
    marks = first.join(second, on="task_id").select(
        "task_id", mark=pl.when(either).then(pl.lit("mixed")).otherwise(pl.lit("always"))).sort("task_id")
    buffer = io.BytesIO()
    marks.write_parquet(buffer)
    write_bytes_atomic(out, buffer.getvalue())
    return out


def decision_sides(tasks: list[Task]) -> dict[str, tuple[str, str]]:
    """Each task's decision: its first reference call's tool, and the argument keys that call sets (crm.find_contact
    by ``name`` or by ``company``); tasks without a reference call have none."""
    return {t.id: (c.tool, ",".join(sorted(c.args))) for t in tasks for c in t.reference.calls[:1]}


def balance_marks(per_task: str, tasks: list[Task], train_on: str, out: Path) -> tuple[Path, int]:
    """``flywheel run --curriculum-balance``: the picks of a tool that sides of a decision split unevenly (6 by name,
    3 by company) teach GRPO the larger side, so each side keeps as many picks as the tool's rarest side has (the first
    by task id) and the rest are marked "always", which GRPO skips. ``tasks``: the train tasks (their reference
    calls). Returns the marks file and the number of picks left out."""
    import io

    import polars as pl

    from flywheel.tasks.files import write_bytes_atomic

    marks = pl.read_parquet(per_task, columns=["task_id", "mark"]).sort("task_id")
    side, skipped = decision_sides(tasks), skip_ids(per_task, train_on)
    by_tool: dict[str, dict[str, list[str]]] = {}
    for i in marks["task_id"]:
        if i not in skipped and i in side:
            by_tool.setdefault(side[i][0], {}).setdefault(side[i][1], []).append(i)
    drop = [i for sides in by_tool.values() for ids in sides.values() for i in ids[min(map(len, sides.values())):]]
    left_out = pl.col("task_id").is_in(pl.Series(drop, dtype=pl.Utf8).implode())
    buffer = io.BytesIO()
    marks.with_columns(mark=pl.when(left_out).then(pl.lit("always")).otherwise("mark")).write_parquet(buffer)
    write_bytes_atomic(out, buffer.getvalue())
    return out, len(drop)
