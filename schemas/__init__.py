"""Records shared by every stage (see records.py, seeds.py and evaluation.py)."""

from flywheel.schemas.evaluation import (
    Decision,
    EvalReport,
    FailureBucket,
    FailureExample,
    Metric,
    TaskPass,
    Thresholds,
)
from flywheel.schemas.records import (
    CodeTest,
    DatasetManifest,
    Message,
    Reference,
    Rollout,
    SafetyRule,
    Task,
    TaskMeta,
    ToolCall,
    ToolSpec,
    Verdict,
    canonical_json,
    sha256_text,
)
from flywheel.schemas.seeds import SeedTask

__all__ = [
    "CodeTest", "DatasetManifest", "Decision", "EvalReport", "FailureBucket", "FailureExample", "Metric", "TaskPass",
    "Thresholds", "Message", "Reference", "Rollout", "SafetyRule", "SeedTask", "Task", "TaskMeta",
    "ToolCall", "ToolSpec", "Verdict", "canonical_json", "sha256_text",
]
