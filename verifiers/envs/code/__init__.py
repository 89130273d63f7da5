"""The code env: a Python function, run against the reference solution's outputs in the sandbox."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flywheel.schemas import CodeTest, Reference, SeedTask, ToolSpec, Verdict
from flywheel.verifiers.envs.code import code
from flywheel.verifiers.render import fill, reference_answer
from flywheel.verifiers.spec import EnvSpec, renderer

HERE = Path(__file__).resolve().parent
PROMPT = ("Write the Python function the user asks for. Answer with one ```python code block that defines it; "
          "use only the standard library.")
CRASHED = {"syntax_error", "runtime_error", "timeout", "resource_limit"}


def reference_outputs(solution: str, entry_point: str, inputs: list[list[Any]]) -> list[CodeTest]:
    """Expected outputs of a code seed, from its reference solution (seed files are trusted code, like
    the project's own; candidates' code only ever runs in the sandbox)."""
    namespace: dict[str, Any] = {"__name__": "__seed__"}
    exec(compile(solution, f"<seed solution {entry_point}>", "exec"), namespace)  # noqa: S102 - trusted seed code
    fn = namespace[entry_point]
    return [CodeTest(args=tuple(args), expected=json.loads(json.dumps(fn(*copy.deepcopy(args))))) for args in inputs]


def reference(seed: SeedTask, tools: Mapping[str, ToolSpec], values: dict[str, Any]) -> Reference:
    solution, entry = reference_answer(seed, values), fill(seed.entry_point, values)
    return Reference(answer=solution, entry_point=entry,
                     tests=tuple(reference_outputs(solution, entry, [fill(list(i), values) for i in seed.inputs])))


def outcome_flags(verdict: Verdict, called: frozenset[str], expected: frozenset[str]) -> dict[str, Any]:
    return {"execution_success": verdict.failure_class not in CRASHED}


SPEC = EnvSpec(
    name="code", system_prompt=PROMPT, verifier=code, verify=code.verify, reward_fn=code.code_reward,
    render=renderer(PROMPT, reference), reference_completion=lambda task: f"```python\n{task.reference.answer}```",
    seeds_path=HERE / "seeds.jsonl", cases_path=HERE / "cases.jsonl", outcome_flags=outcome_flags,
    seed_fields=frozenset({"answer", "entry_point", "inputs"}), hidden_slots=True,
)
