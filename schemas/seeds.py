"""Seed task records: human-written templates that generators vary.

Contract: a seed has one or more request templates with ``{slot}``
placeholders, a sampler kind per slot, one concrete human example (``values``)
and its reference: for tool_call the tools it offers (from the env's tool
catalog) and the reference ``call``, whose argument strings may hold
placeholders (an argument that is exactly ``"{slot}"`` takes the slot's typed
value); for other envs an ``answer`` template (a command for cli; for math an
expression over the slots that sympy evaluates exactly when ``evaluate``).
For code: ``answer`` is a reference solution, ``entry_point`` the function name and ``inputs`` the tests'
argument lists (expected outputs come from running the trusted reference solution). For workplace:
``state`` is the initial company state and ``calls`` the gold action sequence (the golden final state comes
from replaying it). Slots fill every template, argument and state string. ``env`` comes from the seed file's
name (ENV.jsonl). The per-env rules (which reference fields a seed gives, whether templates may leave slots
unnamed) are the env's: ``EnvSpec.check_seed`` in ``verifiers/spec.py``, applied when seeds are loaded.
"""

from __future__ import annotations

import string
from typing import Any

from pydantic import Field, model_validator

from flywheel.schemas.records import Record, ToolCall


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
    calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    evaluate: bool = False
    entry_point: str | None = None
    inputs: tuple[tuple[Any, ...], ...] = ()
    state: dict[str, Any] | None = None
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> SeedTask:
        if set(self.values) != set(self.slots):
            raise ValueError(f"'values' must give exactly the slots {sorted(self.slots)}, got {sorted(self.values)}")
        for template in self.templates:
            used = placeholders(template)
            if used - set(self.slots):
                raise ValueError(f"template {template!r} uses undeclared slots {sorted(used - set(self.slots))}")
        for call in (self.call, *self.calls):
            if call is not None and call.tool not in self.tools:
                raise ValueError(f"reference tool {call.tool!r} is not among the seed's tools {list(self.tools)}")
        return self
