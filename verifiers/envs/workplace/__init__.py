"""The workplace env: a multi-turn agent episode over a simulated company, scored by its final state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flywheel.schemas import Message, Reference, SeedTask, Task, TaskMeta, ToolCall, ToolSpec, Verdict
from flywheel.verifiers.envs.workplace import workplace
from flywheel.verifiers.render import fill
from flywheel.verifiers.spec import EnvSpec, renderer

HERE = Path(__file__).resolve().parent
PROMPT = ("You are a workplace assistant with access to the company's mail, calendar, projects and CRM "
          "through tools. Look up what you need, make the requested changes with tool calls, then reply "
          "with a one-line plain-text summary. Never delete or cancel anything you were not asked to.")


def replayed(task: Task) -> Reference:
    """The task's reference with its golden final state: the reference calls replayed in a fresh session from the
    initial state; ValueError when the state is not a workplace state (every table, records with the fields the tools
    read: a state a tool would crash on) or a reference call fails."""
    from flywheel.verifiers.envs.workplace.workplace_sessions import state_problem
    from flywheel.verifiers.envs.workplace.workplace_tools import records_problem

    state = task.reference.state
    problem = state_problem("state", state) or (records_problem("state", state) if isinstance(state, dict) else None)
    if problem:
        raise ValueError(problem)
    session = workplace.Session.seeded(task)
    for call in task.reference.calls:
        observation = session.call(call.tool, call.args)
        if "error" in observation:
            raise ValueError(f"reference call {call.tool} fails: {observation['error']}")
    return task.reference.model_copy(update={"final_state": session.state})


def reference(seed: SeedTask, tools: Mapping[str, ToolSpec], values: dict[str, Any]) -> Reference:
    """The gold calls and initial state, and the golden final state from replaying them; ValueError when a
    reference call fails."""
    calls = tuple(ToolCall(tool=c.tool, args=fill(c.args, values)) for c in seed.calls)
    probe = Task(env=seed.env, messages=(Message(role="user", content="-"),),
                 tools=tuple(tools[n] for n in seed.tools),
                 reference=Reference(calls=calls, state=fill(seed.state, values)), meta=TaskMeta(seed_id=seed.id))
    try:
        return replayed(probe)
    except ValueError as exc:
        raise ValueError(f"seed {seed.id}: {exc}") from None


def resources_server(**limits: Any) -> Any:
    """The resources server app (``workplace_server.create_app``) under ``workplace_server.Limits(**limits)``."""
    from flywheel.verifiers.envs.workplace.workplace_server import Limits, create_app

    return create_app(Limits(**limits))


def outcome_flags(verdict: Verdict, called: frozenset[str], expected: frozenset[str]) -> dict[str, Any]:
    return {"correct_tool": bool(expected) and expected <= called,
            "execution_success": (verdict.failure_class != "format_error"
                                  and verdict.components.get("tool_errors", 1) == 0)}


SPEC = EnvSpec(
    name="workplace", system_prompt=PROMPT, verifier=workplace, verify=workplace.verify,
    reward_fn=workplace.workplace_reward, render=renderer(PROMPT, reference),
    reference_completion=lambda task: json.dumps(workplace.trajectory_from_calls(task.reference.calls)),
    seeds_path=HERE / "seeds.jsonl", tools_path=HERE / "tools.json", cases_path=HERE / "cases.jsonl",
    multi_turn=True, outcome_flags=outcome_flags, resources_server=resources_server,
    seed_fields=frozenset({"calls", "state"}), hidden_slots=True, ingest=True, replay_reference=replayed,
    # gold episodes seen three times over, LoRA on the MLP layers too, and 80 held-out tasks per eval so that
    # GRPO's paired interval can decide: bench/results/learning.md ("Workplace: three epochs of SFT")
    # GRPO rewards the verifier's state match (partial credit); success-or-nothing is untried on agents
    run_defaults={"n": 400, "eval_limit": 80, "sft_steps": 240, "lora_targets": "all-linear",
                  "grpo_learning_rate": 1e-4, "grpo_reward": "verifier"},
)
