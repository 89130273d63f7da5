"""Verifiers: reward functions in TRL's form plus ``verify(task, completion) -> Verdict``.

Names map to verifier modules only here, at the edge (CLI, deployment YAML).
"""

from __future__ import annotations

from types import ModuleType

from flywheel.verifiers import cli, code, judge, math, tool_call, workplace

VERIFIERS: dict[str, ModuleType] = {m.NAME: m for m in (tool_call, cli, math, code, workplace, judge)}


def get_verifier(name: str) -> ModuleType:
    try:
        return VERIFIERS[name]
    except KeyError:
        raise ValueError(f"unknown verifier {name!r}; choose one of: {', '.join(sorted(VERIFIERS))}") from None
