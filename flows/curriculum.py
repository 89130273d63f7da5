"""``flywheel run``'s curriculum before GRPO: evals of the start policy on the first train tasks mark each task
(always / never / mixed solved), and GRPO trains on the ones with signal (``--curriculum``, ``--curriculum-balance``).
Also ``validation_size``: the train tasks held apart for GRPO's checks, never trained on."""

from __future__ import annotations

from pathlib import Path

from flywheel.flows.config import EvalConfig, RunConfig
from flywheel.flows.eval import eval_policy


def validation_size(config: RunConfig, dataset: str) -> int:
    """--validation-tasks, at most a quarter of the train split (a small dataset keeps most of its tasks to train)."""
    from flywheel.tasks.data.publish import read_manifest

    return min(config.validation_tasks, read_manifest(Path(dataset)).counts.get("train", 0) // 4)



def curriculum(config: RunConfig, dataset: str, model: str | None) -> tuple[str | None, int | None, str]:
    """Before GRPO: K samples of each of the first N train tasks with the policy GRPO starts from; GRPO trains on
    the tasks with mixed outcomes only (the others give groups of equal rewards); ``--curriculum failures``: one
    greedy answer to each, and GRPO trains on the tasks it gets wrong; ``both``: on the tasks either picks. Returns
    the per_task.parquet to skip by, the train limit that covers exactly the sampled tasks, and what happened."""
    from flywheel.tasks.data.publish import read_manifest
    from flywheel.tasks.training.train import union_marks

    trainable = read_manifest(Path(dataset)).counts.get("train", 0) - validation_size(config, dataset)
    limit = max(1, min(config.curriculum_tasks, config.train_limit or config.curriculum_tasks, trainable))
    if not config.curriculum_samples:  # (never into the validation slice, the last train tasks by id)
        return None, config.train_limit, "curriculum off"
    out = Path(config.out) / "curriculum"
    greedy = _curriculum_eval(config, dataset, model, limit, out, True) if config.curriculum != "mixed" else None
    sampled = (_curriculum_eval(config, dataset, model, limit, out.with_name("curriculum-sampled") if greedy else out,
                                False) if config.curriculum != "failures" else None)
    parts = [f"{_marks(greedy).get('never', 0)} of {limit} train tasks answered wrong by greedy decoding"] if greedy \
        else []
    if sampled:
        c = _marks(sampled)
        parts.append(f"{c.get('mixed', 0)} of {limit} train tasks mixed ({c.get('always', 0)} always, "
                     f"{c.get('never', 0)} never solved in {config.curriculum_samples} samples)")
    per_task = str(union_marks(greedy, sampled, out / "failures_and_mixed.parquet")) if greedy and sampled \
        else greedy or sampled
    assert per_task is not None  # greedy or sampled ran: curriculum != mixed, or != failures
    marks = _marks(per_task)
    kept = marks.get("mixed", 0) + (marks.get("never", 0) if config.curriculum != "mixed" else 0)
    what = "; ".join(parts)
    if not kept:
        return None, config.train_limit, f"{what}: GRPO trains on every train task"
    on = {"mixed": "the mixed ones", "failures": "those", "both": f"the {kept} in either"}[config.curriculum]
    if config.curriculum_balance:
        per_task, dropped = _balance(config, dataset, per_task)
        on += f", {kept - dropped} of them balanced by decision ({dropped} left out)"
    return per_task, limit, f"{what}: GRPO trains on {on}"


def _balance(config: RunConfig, dataset: str, per_task: str) -> tuple[str, int]:
    """--curriculum-balance: the picks cut to each tool's rarest side of a decision (``balance_marks``)."""
    import polars as pl

    from flywheel.schemas.records import Task
    from flywheel.tasks.data.publish import read_split
    from flywheel.tasks.training.train import balance_marks

    ids = pl.read_parquet(per_task, columns=["task_id"])["task_id"].implode()
    rows = read_split(Path(dataset), "train", ["id", "task"]).filter(pl.col("id").is_in(ids))
    tasks = [Task.model_validate_json(t) for t in rows["task"]]
    path, dropped = balance_marks(per_task, tasks, "failures" if config.curriculum != "mixed" else "mixed",
                                  Path(config.out) / "curriculum" / "balanced.parquet")
    return str(path), dropped


def _curriculum_eval(config: RunConfig, dataset: str, model: str | None, limit: int, out: Path, greedy: bool) -> str:
    """One greedy answer per task, or --curriculum-samples at temperature 1; the eval's per_task.parquet."""
    ev = eval_policy(EvalConfig(dataset=dataset, split="train", out=str(out), model=model,
                                samples=1 if greedy else config.curriculum_samples,
                                temperature=0.0 if greedy else 1.0, limit=limit, seed=config.seed,
                                max_tokens=config.max_tokens, prefix_cache=config.prefix_cache,
                                backend=config.eval_backend))
    return str(Path(ev.report).parent / "per_task.parquet")


def _marks(per_task: str) -> dict[str, int]:
    import polars as pl

    return dict(pl.read_parquet(per_task, columns=["mark"])["mark"].value_counts().rows())
