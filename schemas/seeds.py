"""Seed task records: human-written templates that generators vary.

Contract: a seed has one or more request templates with ``{slot}``
placeholders, a sampler kind per slot, one concrete human example (``values``)
and its reference: for tool_call the tools it offers (from the env's tool
catalog) and the reference ``call``, whose argument strings may hold
placeholders (an argument that is exactly ``"{slot}"`` takes the slot's typed
value); for other envs an ``answer`` template (a command for cli; for math an
expression over the slots that sympy evaluates exactly when ``evaluate``).
``env`` comes from the seed file's name (ENV.jsonl).
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
    env: str = "tool_call"
    tools: tuple[str, ...] = ()
    templates: tuple[str, ...] = Field(min_length=1)
    slots: dict[str, str]
    values: dict[str, Any]
    call: ToolCall | None = None
    answer: str | None = None
    evaluate: bool = False
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> SeedTask:
        if set(self.values) != set(self.slots):
            raise ValueError(f"'values' must give exactly the slots {sorted(self.slots)}, got {sorted(self.values)}")
        for template in self.templates:
            if placeholders(template) != set(self.slots):
                raise ValueError(f"template {template!r} must use exactly the slots {sorted(self.slots)}")
        if (self.call is None) == (self.answer is None):
            raise ValueError("give exactly one reference: 'call' (tool_call) or 'answer' (other envs)")
        if self.call is not None and self.call.tool not in self.tools:
            raise ValueError(f"reference tool {self.call.tool!r} is not among the seed's tools {list(self.tools)}")
        return self
