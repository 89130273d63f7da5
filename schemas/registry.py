"""Registry records: a trained adapter as a ModelVersion, and the audit events that move aliases.

Contract: a ModelVersion is immutable and names everything behind its numbers (files and their hashes, base
model, dataset manifest hash, verifier versions, training config, metrics, eval report); its id derives from
its files' hash. Events are append-only; the aliases (candidate, production) are whatever the events say last:
a register event moves ``candidate``, a promote or rollback event moves ``production`` (an event that says
otherwise is not valid, so a damaged log cannot move an alias the wrong way).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from flywheel.schemas.records import Record

Alias = Literal["candidate", "production"]


class ModelVersion(Record):
    id: str = Field(pattern=r"^mv-[0-9a-f]{12}$")
    name: str
    base_model: dict[str, Any]  # ref, path, hash
    adapter: str  # folder of the PEFT adapter, relative to the version folder
    files: dict[str, str]  # relative path -> sha256
    files_hash: str
    dataset: dict[str, Any]  # path, name, version, content_hash, seeds_hash
    verifiers: dict[str, str]
    training: dict[str, Any]
    metrics: dict[str, Any] = Field(default_factory=dict)
    eval_report: str | None = None  # relative path of the copied report.json
    parent: str | None = None
    created_at: str


class Event(Record):
    seq: int = Field(ge=1)
    at: str
    action: Literal["register", "promote", "rollback"]
    version: str
    alias: Alias | None = None
    previous: str | None = None  # what the alias pointed to before
    gate: dict[str, Any] | None = None  # passed, success delta and CI, report path
    override: str | None = None  # the reason, when a failed gate was overridden
    actor: str = ""

    @model_validator(mode="after")
    def _moves_its_alias(self) -> Event:
        expected = "candidate" if self.action == "register" else "production"
        if self.alias != expected:
            raise ValueError(f"a {self.action} event moves the {expected} alias, not {self.alias!r}")
        return self
