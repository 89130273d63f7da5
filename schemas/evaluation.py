"""The evaluation report: metrics with 95% bootstrap intervals, failure buckets, the training decision.

Contract: an EvalReport names exactly what was measured (dataset version and content hash, split, model and its
file hash, backend, sampling, seeds, verifier versions, code version), so any number traces back to its inputs.
Its ``model`` holds string ``ref``, ``backend`` and ``model_id``, and ``hash`` (every file) and ``weights`` (the
files that decide the outputs) as sha256 or null (a served model), and ``base``: an adapter's base checkpoint
(``model_id``, ``hash``, ``weights``, as above), null for a full checkpoint or a served model (absent in reports
written before it was recorded); ``rollouts_sha256`` is the sha256 of the rollouts.parquet written beside it (null
in reports written before it was recorded).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

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
                                   description="Decision: valid-output rate below this: SFT first.")
    rl_min_pass_at_k: float = Field(default=0.02, ge=0.0, le=1.0, description="Decision: pass@k below this (the "
                                    "format is fine, tasks are never solved): SFT first.")
    done_at_pass_at_1: float = Field(default=0.9, ge=0.0, le=1.0,
                                     description="Decision: pass@1 at or above this: done (already good enough).")


class Decision(Record):
    action: Literal["sft", "rl", "done"]
    reason: str
    thresholds: Thresholds


class TaskPass(Record):
    always: int  # tasks solved in every sample
    never: int
    mixed: int
    equal_rewards: int  # tasks whose samples all got the same reward: GRPO learns nothing from them


def _model_fields(model: dict[str, Any]) -> dict[str, Any]:
    """What readers of ``EvalReport.model`` rely on (the dict may hold more)."""
    for key in ("ref", "backend", "model_id"):
        if not isinstance(model.get(key), str):
            raise ValueError(f"model.{key} must be a string")
    for key in ("hash", "weights"):
        if not isinstance(model.get(key), str | None):
            raise ValueError(f"model.{key} must be a string or null")
    base = model.get("base")
    if base is not None and not (isinstance(base, dict) and all(isinstance(base.get(k), str)
                                                                for k in ("model_id", "hash", "weights"))):
        raise ValueError("model.base must be null or an object with string model_id, hash and weights")
    return model


MAX_REPORT_BYTES = 16 << 20  # a report is tens of KB; its failure examples are capped


class EvalReport(Record):
    dataset: dict[str, Any]
    split: str
    model: Annotated[dict[str, Any], AfterValidator(_model_fields)]
    sampling: dict[str, Any]
    seed: int
    samples: int
    success_threshold: float = Field(gt=-1.0, le=1.0)
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
    rollouts_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
