"""Seed task records: human-written templates that generators vary.

Contract: a seed names the tools it offers (from the env's tool catalog), one or
more request templates with ``{slot}`` placeholders, a sampler kind per slot, one
concrete human example (``values``) and the reference call, whose argument
strings may hold placeholders. An argument that is exactly ``"{slot}"`` takes
the slot's typed value (numbers stay numbers).
"""

from __future__ import annotations

import string
from typing import Any

from pydantic import Field, model_validator

from schemas.records import Record, ToolCall


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


class SeedTask(Record):
    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    tools: tuple[str, ...] = Field(min_length=1)
    templates: tuple[str, ...] = Field(min_length=1)
    slots: dict[str, str]
    values: dict[str, Any]
    call: ToolCall
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> SeedTask:
        if set(self.values) != set(self.slots):
            raise ValueError(f"'values' must give exactly the slots {sorted(self.slots)}, got {sorted(self.values)}")
        for template in self.templates:
            if placeholders(template) != set(self.slots):
                raise ValueError(f"template {template!r} must use exactly the slots {sorted(self.slots)}")
        if self.call.tool not in self.tools:
            raise ValueError(f"reference tool {self.call.tool!r} is not among the seed's tools {list(self.tools)}")
        return self
