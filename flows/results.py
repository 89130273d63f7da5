"""Typed results the flows return and hand each other (instead of dicts read by key).

Contract: each flow returns one of these frozen pydantic models; ``RunSummary.model_dump()`` is exactly what
``summary.json`` holds (same keys, same order). ``result["key"]`` still reads a field, for scripts written
against the earlier dict results (bench/, tests); new code reads attributes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from flywheel.flows.config import RunConfig
from flywheel.schemas import Metric
from flywheel.schemas.registry import Event
from flywheel.tasks.release.gate import Check, Delta


class Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __getitem__(self, key: str) -> Any:
        """A field by name (KeyError if none): dict-style reads for callers of the earlier dict results."""
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)


class GenerateCounts(Result):
    train: int
    heldout: int
    rejected: int
    candidates: int
    requested: int


class GenerateResult(Result):
    """``generate-dataset``: the published version folder, counts, reject reasons, cache hits and timings."""

    version_dir: str
    counts: GenerateCounts
    stage_counts: dict[str, dict[str, int]]
    reject_reasons: dict[str, int]
    candidates: int
    cache_hits: list[str]
    timings: dict[str, float | dict[str, float]]


class BatchCounts(Result):
    total: int
    reused: int  # finished before (a resumed eval) or copied from a ``reuse`` folder
    run: int
    copied: int = 0  # of ``reused``: copied from a ``reuse`` folder (the report's ``copied_from`` names them)


class EvalResult(Result):
    """``baseline-eval``: where the report is, the SFT/RL/done decision and the metrics."""

    report: str
    decision: str
    reason: str
    metrics: dict[str, Metric]
    batches: BatchCounts
    wall_s: float


class TrainRun(Result):
    """What ``tasks.training.train.train`` returns (also written as OUT/train_log.json); keys added there later
    are ignored here."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    method: str
    adapter: str
    adapter_hash: str
    base_model: str
    resumed_from: str | None
    train_s: float
    tasks: int
    heldout_tasks: int
    config: dict[str, Any]
    history: list[dict[str, Any]]
    selected_step: int | None = None  # the checkpoint kept: the best on the validation slice, else the last
    flags: list[dict[str, Any]] = []  # selection.drift_flags raised while training


class TrainResult(Result):
    """``train-policy``: the adapter, its held-out eval folder and metrics, its registry version."""

    adapter: str
    train_s: float
    history: list[dict[str, Any]]
    eval: str | None = None
    version: str | None = None
    metrics: dict[str, Metric] = {}
    selected_step: int | None = None
    flags: list[dict[str, Any]] = []


class PromoteResult(Result):
    """``promote``: the gate's verdict and report; ``event`` is the registry event, None when nothing moved."""

    version: str
    passed: bool
    failures: list[str]
    success_delta: float
    success_ci: tuple[float, float]
    report: str
    event: Event | None = None
    checks: list[Check] = []


class IngestResult(Result):
    """``ingest-trajectories``: the new (or unchanged) version, tasks added, buckets, report files."""

    version_dir: str
    added: int
    buckets: dict[str, int]
    report: str
    trajectories: str


class EvalSummary(Result):
    report: str
    metrics: dict[str, Metric]


class StageSummary(Result):
    adapter: str
    version: str | None
    eval: str | None
    train_s: float
    selected_step: int | None = None
    flags: list[dict[str, Any]] = []


class RunSummary(Result):
    """``flywheel-run``: summary.json's content."""

    dataset: str
    evals: dict[str, EvalSummary]
    stages: dict[str, StageSummary]
    gate: PromoteResult
    curriculum: str  # what the curriculum before GRPO kept
    promoted_stage: str  # the stage the gate judged ("sft" or "grpo", by tasks/release/gate.py: pick_stage)
    pick_reason: str
    grpo_vs_sft: Delta | None  # GRPO minus SFT held-out success, paired 95% CI (None without an SFT stage)
    over_cap: list[str] = []  # held-out tasks (of the evals) whose gold answer is longer than --max-tokens
    registry: str
    wall_s: float
    config: RunConfig


class StageResult(Result):
    """A dataset stage task (generate, exact and near dedupe, validate): its parquet files, counts (in, kept,
    rejected) and seconds; ``accepted_total`` (near dedupe) counts the rows accepted over every round so far."""

    kept: str
    rejected: str
    counts: dict[str, int]
    seconds: float
    work_seconds: float
    accepted_total: int | None = None

    def files(self) -> list[str]:
        return [self.kept, self.rejected]


class QualityResult(Result):
    """The data-quality suite: its JSON result file, whether it passed and the failed expectations."""

    result: str
    passed: bool
    failed: list[str]

    def files(self) -> list[str]:
        return [self.result]


class SplitResult(Result):
    """The split + decontamination stage: train, held-out and rejected parquet files, their counts."""

    train: str
    heldout: str
    rejected: str
    counts: dict[str, int]
    seconds: float

    def files(self) -> list[str]:
        return [self.train, self.heldout, self.rejected]
