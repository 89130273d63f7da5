"""Ingest for multi-step envs (workplace): a production episode re-scored by replaying it, a failure with a human
correction turned into a held-out regression task (``rescore_episode``, called by ``ingest.rescore``).

- The episode needs ``state``: the environment's state when it started (without it: ``no_reference``).
- The expected calls: with a correction, the agent's calls before the corrected message, then the correction's
  ``tool_calls``; without one, when the outcome says success, the agent's own calls. Neither: ``no_reference``.
- The regression task: the env's system prompt, the user's request, the catalog's tools offered or expected, the
  expected calls and the initial state as reference, the golden final state by replaying them
  (``EnvSpec.replay_reference``). A state the tools cannot work on, expected calls that fail, or whose replay
  raises or does not score 1.0, are ``invalid_reference``: one row's reject; the other lines go on.
- The agent's episode (its assistant messages' calls, in order) is replayed in a fresh session and scored by the
  current verifier; a failure becomes the task. A verifier pass on a failed outcome is flagged ``disagrees``.
"""

from __future__ import annotations

import json
from typing import Any

from flywheel.schemas import Message, Reference, Task, TaskMeta, ToolCall, ToolSpec
from flywheel.tasks.inference.protocol import MAX_DEPTH, json_depth
from flywheel.verifiers.envs import get_env


def tool_call(tc: Any) -> ToolCall:
    """An OpenAI tool call (``{"function": {"name", "arguments": JSON object text}}``) as a ToolCall; anything else
    (arguments that are not a JSON object, nested deeper than ``MAX_DEPTH``, a number too long to read) raises
    ValueError saying what is wrong (a crafted line is a bucketed row, never a crashed ingest)."""
    fn = tc.get("function", tc) if isinstance(tc, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError(f"not an OpenAI tool call (no function name): {json.dumps(tc, default=str)[:120]}")
    args = fn.get("arguments", {})
    try:
        args = json.loads(args) if isinstance(args, str) else args
    except RecursionError:  # json's C parser recurses: a string of 100,000 brackets
        raise ValueError(f"arguments nested deeper than {MAX_DEPTH} levels") from None
    if json_depth(args) > MAX_DEPTH:
        raise ValueError(f"arguments nested deeper than {MAX_DEPTH} levels")
    return ToolCall(tool=fn["name"], args=args)


def tool_names(tools: Any, calls: Any) -> list[str]:
    """The tools a trajectory offered (named entries, in order), then those its expected calls use; an entry that
    is not an OpenAI tool (``{"function": {"name": ...}}``) raises ValueError."""
    offered = []
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else 0  # a tool entry without a name is left out
        if not isinstance(name, str | None):
            raise ValueError(f"unreadable tool entry: {json.dumps(t, default=str)[:120]}")
        offered += [name] if name else []
    return list(dict.fromkeys(offered + [c.tool for c in calls]))


def _calls(tool_calls: Any) -> list[ToolCall]:
    return [tool_call(tc) for tc in tool_calls or ()]


def expected_episode(traj: Any) -> tuple[ToolCall, ...]:
    """The calls a correct episode makes (see the contract); () when there is nothing to score against."""
    fixes = [iv for iv in traj.interventions if iv.kind == "correction" and iv.tool_calls]
    if fixes:
        before = [c for m in traj.messages[:fixes[0].message_index] if m.role == "assistant"
                  for c in _calls(m.tool_calls)]
        return tuple(before + _calls(fixes[0].tool_calls))
    if traj.outcome.success and not traj.interventions:
        return tuple(c for m in traj.messages if m.role == "assistant" for c in _calls(m.tool_calls))
    return ()


def scored(row: dict[str, Any], traj: Any, task: Task, verdict: Any, user: str) -> dict[str, Any]:
    """The row of a trajectory the current verifier scored (single- or multi-turn): its bucket, and the regression
    task when it failed."""
    passed = verdict.reward == 1.0
    row |= {"bucket": "passed" if passed else verdict.failure_class or "failed", "reward": verdict.reward,
            "detail": verdict.details, "disagrees": passed and traj.outcome.success is False, "prompt": user}
    if not passed:
        row["task"] = task.model_dump_json()
    return row


def rescore_episode(traj: Any, catalog: dict[str, ToolSpec], row: dict[str, Any]) -> dict[str, Any]:
    spec = get_env(traj.env)
    user = next((m.content for m in traj.messages if m.role == "user" and m.content), None)
    if traj.state is None:
        return row | {"bucket": "no_reference", "detail": f"a {traj.env} episode needs `state`: the environment's "
                                                          "state when it started, to replay the episode"}
    try:
        calls = expected_episode(traj)
    except ValueError as exc:  # pydantic's ValidationError and JSONDecodeError are ValueErrors
        return row | {"bucket": "no_reference", "detail": f"unreadable call: {exc}"[:300]}
    if not calls or user is None:
        return row | {"bucket": "no_reference", "detail": "no user request, correction or successful outcome"}
    try:
        names = tool_names(traj.tools, calls)
    except ValueError as exc:
        return row | {"bucket": "unknown_tool", "detail": str(exc)[:300]}
    unknown = [n for n in names if n not in catalog]
    if unknown:
        return row | {"bucket": "unknown_tool", "detail": f"not in the tool catalog: {', '.join(unknown)}"}
    replay = spec.replay_reference
    if replay is None:
        raise RuntimeError(f"env {traj.env} is multi-turn but declares no replay_reference (verifiers/spec.py)")

    def regression_task(reference: Reference) -> Task:
        return Task(env=traj.env, messages=(Message(role="system", content=spec.system_prompt),
                                            Message(role="user", content=user)),
                    tools=tuple(catalog[n] for n in names), reference=reference,
                    meta=TaskMeta(seed_id=f"prod:{traj.id}", generator="ingest", category="regression"))

    try:  # the id hashes the content: the task is built again with its golden final state
        task = regression_task(replay(regression_task(Reference(calls=calls, state=traj.state))))
    except ValueError as exc:
        return row | {"bucket": "invalid_reference", "detail": f"the expected calls do not replay: {exc}"[:300]}
    except Exception as exc:  # noqa: BLE001 - a state a tool cannot work on: this row's reject, never a crashed ingest
        return row | {"bucket": "invalid_reference",
                      "detail": f"the expected calls do not replay: {type(exc).__name__}: {exc}"[:300]}
    problem = spec.check_reference(task)
    if problem is not None:
        return row | {"bucket": "invalid_reference", "detail": f"{problem[0]}: {problem[1]}"[:300]}
    episode = json.dumps([m.model_dump(exclude_none=True) for m in traj.messages])
    return scored(row, traj, task, spec.verify(task, episode), user)
