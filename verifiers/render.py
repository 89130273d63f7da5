"""Rendering helpers envs share: slot values into request text and reference arguments, exact math answers.

Contract: pure functions of their arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flywheel.schemas import Reference, SeedTask, ToolSpec


def format_value(value: Any) -> str:
    """How a slot value reads in a request (floats keep two decimals)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.2f}"
    return str(value)


def fill(value: Any, values: dict[str, Any]) -> Any:
    """Substitute slots into a reference argument, keeping a lone slot's type."""
    if isinstance(value, str):
        if value.startswith("{") and value.endswith("}") and value[1:-1] in values:
            return values[value[1:-1]]
        return value.format(**{k: format_value(v) for k, v in values.items()})
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, dict):  # keys too: workplace state tables are keyed by templated record ids
        return {fill(k, values): fill(v, values) for k, v in value.items()}
    return value


def reference_answer(seed: SeedTask, values: dict[str, Any]) -> str:
    """The seed's answer template filled in; math expressions are evaluated exactly (our own numbers only)."""
    text = (seed.answer or "").format(**{k: format_value(v) for k, v in values.items()})
    if not seed.evaluate:
        return text
    import sympy

    # sympy's sympify overloads leave out its keyword arguments (rational=)
    return str(sympy.nsimplify(sympy.sympify(text, rational=True)))  # ty: ignore[no-matching-overload]


def answer_reference(seed: SeedTask, tools: Mapping[str, ToolSpec], values: dict[str, Any]) -> Reference:
    """The reference of envs whose seeds give an ``answer`` template (math, cli)."""
    return Reference(answer=reference_answer(seed, values))
