"""The bounded checks of a tool call: its tool's JSON Schema (``tool_schemas``) and safety rules (``tool_rules``), in
process for the shipped catalogs' specs and in a bounded worker for any other (used by the tool_call and workplace
verifiers).

- ``checked_call(task, call, spec)`` -> ``CallCheck`` (the schema violation, the unsafe reasons, the args as
  validated); raises ``TaskBoundExceeded`` when an untrusted spec's checks cross ``LIMITS`` (the task's fault),
  ``bounds.WorkerError`` when the check itself failed, and, given ``wait_s``, ``bounds.Busy`` when no worker
  freed up in time (the call was not checked: retry it).
- A ``$ref`` that leaves the schema is never fetched: ``ForeignReference`` (verifier_error, the task's fault).
- ``schema_errors`` and ``validator_for`` validate in process, unbounded: for trusted input (Task validation).
Why the bound is by provenance (a task's own regexes can backtrack catastrophically): verifiers/README.md.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import fastjsonschema

from flywheel.schemas import Task, ToolCall, ToolSpec
from flywheel.verifiers import bounds
from flywheel.verifiers.tool_rules import (  # noqa: F401 - re-exported
    EXACT_ARG,
    MISCOPY_MAX_CHARS,
    _breaks_rule,
    _miscopies,
    arg_form,
    exact_form,
)
from flywheel.verifiers.tool_schemas import (  # noqa: F401 - re-exported
    LINEAR_EQUIVALENTS,
    REFUSE_REMOTE,
    SHIPPED_CATALOGS,
    TRUSTED_PATTERNS,
    TRUSTED_SCHEMAS,
    ForeignReference,
    Validator,
    _compiled,
    _Schema,
    _schema,
    _trusted,
    _violation,
    schema_errors,
    trusted,
    validator_for,
)

# One call's schema check and safety rules take microseconds for a sane task; a second of CPU is a runaway regex.
LIMITS = bounds.Limits(cpu_s=1, wall_s=4.0, memory_bytes=1 << 30, warm=("flywheel.verifiers.tool_checks",))


class TaskBoundExceeded(ValueError):
    """An untrusted tool's schema or safety rules crossed ``LIMITS`` on a call's arguments: the task's fault."""


Violation = tuple[str | None, str]  # fastjsonschema's (name, message) of the first schema violation


class CallCheck(NamedTuple):
    """What one call's checks found: the schema violation (None when the args validate), the unsafe reasons, and
    the args as validated (fastjsonschema fills in schema defaults)."""

    violation: Violation | None
    unsafe: list[str]
    args: dict[str, Any]

    @property
    def problems(self) -> list[str]:
        return [_violation(*self.violation)] if self.violation else []


def _check(spec: ToolSpec, args: dict[str, Any], expected: tuple[ToolCall, ...],
           entry: _Schema | None = None) -> CallCheck:
    """The part of a call's checks that runs the task's regexes (in process or in a worker)."""
    try:
        _compiled(entry or _schema(spec.parameters))(args)
        violation = None
    except fastjsonschema.JsonSchemaValueException as err:
        violation = (err.name, err.message)
    broken = [f"breaks safety rule {r.kind} on {r.arg!r}" for r in spec.safety_rules
              if _breaks_rule(r, args, expected, spec.parameters, violation is not None)] if spec.safety_rules else []
    return CallCheck(violation, broken, args)


def compile_checks(spec: ToolSpec) -> None:
    """Compile a spec's schema and forbidden patterns in this process (linear in their size), so that a foreign
    ``$ref`` or a broken schema or regex fails exactly as on the in-process path before any worker is asked."""
    validator_for(spec.parameters)
    for rule in spec.safety_rules:
        if rule.kind == "forbidden_pattern":
            re.compile(rule.pattern or "")


def checked_call(task: Task, call: ToolCall, spec: ToolSpec, *, wait_s: float | None = None) -> CallCheck:
    """Schema violation and unsafe reasons of ``call`` (a destructive tool the reference does not call, broken
    safety rules, checked against every reference call of the tool). A trusted spec is checked in process, any
    other in a worker under ``LIMITS`` (see the module contract); raises TaskBoundExceeded when that crosses the
    bound, bounds.WorkerError when the check failed, bounds.Busy when ``wait_s`` passed with no worker free."""
    expected = tuple(c for c in task.reference.calls if c.tool == call.tool)
    entry = _schema(spec.parameters)
    if _trusted(spec, entry) or bounds.IN_WORKER:
        found = _check(spec, call.args, expected, entry)
    else:
        compile_checks(spec)
        try:
            found = bounds.run(_check, spec, call.args, expected, limits=LIMITS, wait_s=wait_s)
        except bounds.BoundExceeded as err:
            raise TaskBoundExceeded(
                f"tool {spec.name!r}: checking these arguments against the task's schema and safety rules {err} "
                "(a 'pattern', 'patternProperties', 'format' or 'forbidden_pattern' regex of the task backtracks "
                "catastrophically?): fix the task's tool spec") from None
    if spec.safety == "destructive" and not expected:
        found.unsafe.insert(0, f"destructive tool {call.tool} was not requested")
    return found


def unsafe_reasons(task: Task, call: ToolCall, spec: ToolSpec) -> list[str]:
    """Why executing ``call`` would be an unsafe action ([] when it is safe); bounded as ``checked_call``."""
    return checked_call(task, call, spec).unsafe
