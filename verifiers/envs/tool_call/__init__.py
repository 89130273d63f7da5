"""The tool_call env: one JSON tool call per request, scored against the reference call."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flywheel.schemas import Reference, SeedTask, Task, ToolCall, ToolSpec, Verdict
from flywheel.verifiers import tool_checks
from flywheel.verifiers.envs.tool_call import tool_call
from flywheel.verifiers.render import fill
from flywheel.verifiers.spec import EnvSpec, renderer

HERE = Path(__file__).resolve().parent
PROMPT = ("You are a workplace assistant. Answer with exactly one JSON object of the form "
          '{"tool": "<tool name>", "args": {...}} that calls one of the available tools. No other text.')


def reference(seed: SeedTask, tools: Mapping[str, ToolSpec], values: dict[str, Any]) -> Reference:
    assert seed.call is not None  # check_seed guarantees the call
    return Reference(calls=(ToolCall(tool=seed.call.tool, args=fill(seed.call.args, values)),))


def reference_completion(task: Task) -> str:
    call = task.reference.calls[0]
    return json.dumps({"tool": call.tool, "args": call.args}, ensure_ascii=False)


def reference_problem(task: Task) -> tuple[str, str] | None:
    if len(task.reference.calls) != 1:
        return "bad_reference", f"{len(task.reference.calls)} reference calls, expected 1"
    call = task.reference.calls[0]
    spec = task.tool(call.tool)
    if spec is None:
        return "bad_reference", f"reference tool {call.tool!r} is not offered"
    errors = tool_checks.schema_errors(spec, call.args)
    return ("args_schema_violation", "; ".join(errors)[:300]) if errors else None


def outcome_flags(verdict: Verdict, called: frozenset[str], expected: frozenset[str]) -> dict[str, Any]:
    c = verdict.components
    return {"correct_tool": c.get("tool", 0.0) > 0, "correct_args": c.get("args", 0.0) >= 0.4 - 1e-9,
            "execution_success": c.get("safe", 0.0) > 0}


def strata(seeds: Sequence[SeedTask], tools: Mapping[str, ToolSpec]) -> tuple[str, ...]:
    return tuple(sorted(tools))


SPEC = EnvSpec(
    name="tool_call", system_prompt=PROMPT, verifier=tool_call, verify=tool_call.verify,
    reward_fn=tool_call.tool_call_reward, render=renderer(PROMPT, reference),
    reference_completion=reference_completion,
    seeds_path=HERE / "seeds.jsonl", tools_path=HERE / "tools.json", cases_path=HERE / "cases.jsonl",
    reference_problem=reference_problem, stratum=lambda seed: seed.call.tool if seed.call else seed.category,
    task_stratum=lambda task: task.reference.calls[0].tool, strata=strata, outcome_flags=outcome_flags,
    seed_fields=frozenset({"call"}), ingest=True,
)
