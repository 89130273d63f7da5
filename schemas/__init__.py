"""Records shared by every stage (see records.py and seeds.py)."""

from schemas.records import (
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
from schemas.seeds import SeedTask

__all__ = [
    "CodeTest", "DatasetManifest", "Message", "Reference", "Rollout", "SafetyRule", "SeedTask", "Task", "TaskMeta",
    "ToolCall", "ToolSpec", "Verdict", "canonical_json", "sha256_text",
]
