"""Registry records: a trained adapter as a ModelVersion, and the audit events that move aliases.

Contract: a ModelVersion is immutable and names everything behind its numbers (files and their hashes, base
model, dataset manifest hash, verifier versions, training config, metrics, eval report); its id derives from
its files' hash. Events are append-only; the aliases (candidate, production) are whatever the events say last:
a register event moves ``candidate``, a promote or rollback event moves ``production`` (an event that says
otherwise is not valid, so a damaged log cannot move an alias the wrong way). Every path a version names is
inside its folder, every id an event names is a version id, and no field an event prints holds a control
character, so a hand-edited file can neither point flywheel outside the registry nor forge a line of
``registry list``.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from flywheel.schemas.records import Record

Alias = Literal["candidate", "production"]
VersionId = Annotated[str, Field(pattern=r"^mv-[0-9a-f]{12}$")]
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]*$"  # no control characters: a field printed as is cannot forge a line


def _inside(path: str) -> str:
    """``path`` names something inside the version folder: relative, no ``..``, not empty."""
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts or "\\" in path:
        raise ValueError(f"{path!r} is not a path inside the version folder")
    return path


Inside = Annotated[str, AfterValidator(_inside)]


class ModelVersion(Record):
    id: VersionId
    name: str
    base_model: dict[str, Any]  # ref, path, hash
    adapter: Inside  # folder of the PEFT adapter, relative to the version folder
    files: dict[Inside, str]  # relative path -> sha256
    files_hash: str
    dataset: dict[str, Any]  # path, name, version, content_hash, seeds_hash
    verifiers: dict[str, str]
    training: dict[str, Any]
    metrics: dict[str, Any] = Field(default_factory=dict)
    eval_report: Inside | None = None  # relative path of the copied report.json
    parent: VersionId | None = None
    created_at: str


class Event(Record):
    seq: int = Field(ge=1)
    at: str = Field(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    action: Literal["register", "promote", "rollback"]
    version: VersionId
    alias: Alias | None = None
    previous: VersionId | None = None  # what the alias pointed to before
    gate: dict[str, Any] | None = None  # passed, success delta and CI, report path
    override: str | None = None  # the reason, when a failed gate was overridden (printed with repr)
    actor: str = Field(default="", pattern=PRINTABLE)

    @model_validator(mode="after")
    def _moves_its_alias(self) -> Event:
        expected = "candidate" if self.action == "register" else "production"
        if self.alias != expected:
            raise ValueError(f"a {self.action} event moves the {expected} alias, not {self.alias!r}")
        return self
