"""The evaluation report: metrics with 95% bootstrap intervals, failure buckets, the training decision.

Contract: an EvalReport names exactly what was measured (dataset version and content hash, split, model and its
file hash, backend, sampling, seeds, verifier versions, code version), so any number traces back to its inputs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from flywheel.schemas.records import Record


class Metric(Record):
    value: float | None
    lo: float | None = None  # 95% bootstrap interval (tasks resampled: samples of one task move together)
    hi: float | None = None
    n: int = Field(ge=0, description="rollouts (or tasks, for pass@k) the value is computed over")


class FailureExample(Record):
    task_id: str
    sample: int
    prompt: str
    completion: str
    details: str


class FailureBucket(Record):
    count: int
    share: float  # of all rollouts
    classes: dict[str, int]  # the verifiers' failure classes in this bucket
    examples: tuple[FailureExample, ...] = ()


class Thresholds(Record):
    sft_below_valid: float = Field(default=0.5, ge=0.0, le=1.0,
                                   description="valid-output rate below this: SFT first")
    rl_min_pass_at_k: float = Field(default=0.02, ge=0.0, le=1.0,
                                    description="pass@k below this (format fine, never succeeds): SFT first")
    done_at_pass_at_1: float = Field(default=0.9, ge=0.0, le=1.0,
                                     description="pass@1 at or above this: already good enough")


class Decision(Record):
    action: Literal["sft", "rl", "done"]
    reason: str
    thresholds: Thresholds


class TaskPass(Record):
    always: int  # tasks solved in every sample
    never: int
    mixed: int
    equal_rewards: int  # tasks whose samples all got the same reward: GRPO learns nothing from them


class EvalReport(Record):
    dataset: dict[str, Any]
    split: str
    model: dict[str, Any]
    sampling: dict[str, Any]
    seed: int
    samples: int
    success_threshold: float
    verifiers: dict[str, str]
    n_tasks: int
    n_rollouts: int
    metrics: dict[str, Metric]
    per_env: dict[str, dict[str, Metric]]
    per_tool: dict[str, dict[str, Metric]]
    failure_buckets: dict[str, FailureBucket]
    decision: Decision
    task_pass: TaskPass
    files: dict[str, str]
    batches: dict[str, int]
    # batches this invocation copied from an earlier eval folder (``EvalConfig.reuse``), per folder; a resumed eval
    # counts the ones copied before as reused (``batches["reused"]``), as it counts its own finished batches
    copied_from: dict[str, int] = {}
    timings: dict[str, float]
    code_version: str
    created_at: str
