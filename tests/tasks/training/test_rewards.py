"""The reward GRPO trains on (tasks/training/rewards.py): success-or-nothing pays nothing for leaving an argument out,
which the verifier's partial credit pays for (the attack a strong policy learns); verifier failures stay None."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from flywheel.schemas import Task, Verdict
from flywheel.tasks.data.validate import reference_completion
from flywheel.tasks.training.rewards import shaped, train_reward
from flywheel.tasks.training.rollout import has_signal
from flywheel.verifiers.envs import get_env


@pytest.fixture(scope="module")
def optional_arg_task(tool_dataset) -> tuple[Task, str]:
    """A train task whose reference call passes an optional argument (one the schema does not require)."""
    for text in pl.read_parquet(Path(tool_dataset) / "train.parquet")["task"]:
        task = Task.model_validate_json(text)
        call = task.reference.calls[0]
        required = set(task.tool(call.tool).parameters.get("required", []))
        optional = sorted(k for k, v in call.args.items() if k not in required and isinstance(v, str))
        if optional and len(call.args) >= 2:
            return task, optional[0]
    raise AssertionError("no train task passes an optional string argument")


def _answers(task: Task, arg: str) -> dict[str, str]:
    call = task.reference.calls[0]
    left_out = {k: v for k, v in call.args.items() if k != arg}
    broken = call.args | {arg: 12345}  # every argument written, one with a value that breaks the schema
    return {"full": reference_completion(task), "left_out": json.dumps({"tool": call.tool, "args": left_out}),
            "broken": json.dumps({"tool": call.tool, "args": broken}), "malformed": "Sure, I will do that."}


def test_success_reward_pays_nothing_for_leaving_an_argument_out(optional_arg_task) -> None:
    task, arg = optional_arg_task
    verdicts = {k: get_env("tool_call").verify(task, c) for k, c in _answers(task, arg).items()}
    partial = {k: train_reward(v, "verifier", 1.0) for k, v in verdicts.items()}
    success = {k: train_reward(v, "success", 1.0) for k, v in verdicts.items()}
    # the hole: partial credit ranks leaving the argument out above writing it with a schema-breaking value
    assert partial["full"] == 1.0 and partial["left_out"] > partial["broken"] > 0 and partial["malformed"] == -1.0
    assert success == {"full": 1.0, "left_out": 0.0, "broken": 0.0, "malformed": -1.0}
    # online filtering sees the training rewards: a group of near misses is flat under success-or-nothing
    assert has_signal([partial["left_out"], partial["broken"]]) and not has_signal([success["left_out"],
                                                                                    success["broken"]])


def test_unsafe_is_the_floor_and_a_verifier_failure_stays_none() -> None:
    unsafe = Verdict(reward=0.8, valid=True, failure_class="unsafe_action", verifier="tool_call", verifier_version="1")
    broken = Verdict(reward=None, valid=False, failure_class="verifier_error", verifier="tool_call",
                     verifier_version="1")
    assert train_reward(unsafe, "success", 1.0) == -1.0 and train_reward(unsafe, "verifier", 1.0) == 0.8
    assert train_reward(broken, "success", 1.0) is None and train_reward(broken, "verifier", 1.0) is None
    assert shaped(0.5, "wrong_state", "success", 0.5) == 1.0  # success as the gate counts it: reward >= threshold
    assert shaped(0.49, "wrong_state", "success", 0.5) == 0.0 and shaped(-1.0, "format_error", "success", 1.0) == -1.0


def test_the_trainers_reward_function_gives_the_training_reward(optional_arg_task) -> None:
    task, arg = optional_arg_task
    answers = _answers(task, arg)
    completions = [[{"role": "assistant", "content": answers[k]}] for k in ("full", "left_out", "malformed")]
    rows = [task.model_dump_json()] * 3
    reward = get_env("tool_call").reward_fn  # what GRPO calls; the GRPO rows' columns choose the shaping
    assert reward(completions, rows, reward_kind=["success"] * 3, success_threshold=[1.0] * 3) == [1.0, 0.0, -1.0]
    assert reward(completions, rows)[1] >= 0.8  # the default stays the verifier's own
    verdicts = [Verdict(reward=0.5, valid=True, verifier="tool_call", verifier_version="1")] * 3
    assert reward(completions, rows, verdict=verdicts) == [0.5] * 3  # a rollout's verdicts are reused, not redone


def test_a_check_of_more_than_100_tasks_reads_a_failure_first_seen_after_the_100th(optional_arg_task) -> None:
    """A 128-task validation slice whose first 100 answers were right crashed the check: polars inferred the rows'
    schema from the first 100 (failure_class always None) and could not append the 101st's "format_error"."""
    from flywheel.tasks.evaluation.metrics import outcome
    from flywheel.tasks.evaluation.rollouts import _row
    from flywheel.tasks.training.train_log import check_rates

    task, arg = optional_arg_task
    answers = ["full"] * 100 + ["malformed", "full"]
    rows = []
    for i, kind in enumerate(answers):
        verdict = get_env("tool_call").verify(task, _answers(task, arg)[kind])
        rows.append(_row(task, "", 0, i, "", verdict, 0.1, (1, 1), "stop", 1, outcome("tool_call", verdict, 1.0)))
    assert rows[0]["failure_class"] is None and rows[100]["failure_class"] == "format_error"
    with pytest.raises(pl.exceptions.ComputeError):  # what the check did before: the schema inferred
        pl.DataFrame(rows)
    rates = check_rates(rows, "val")
    assert rates["val_success"] == round(101 / 102, 4) and rates["val_invalid_rate"] == round(1 / 102, 4)
