"""Ingest for multi-step envs (workplace): a production episode re-scored by replaying it, a failure with a human
correction turned into a held-out regression task.

Contract (``rescore_episode(traj, catalog, row)``, called by ``ingest.rescore`` for a multi-turn env):
- The episode needs ``state``: the environment's state when it started (without it nothing can be replayed:
  ``no_reference``).
- The expected calls: with a correction, the agent's calls before the corrected message, then the correction's
  ``tool_calls`` (what the agent should have done from there on); without one, when the outcome says success, the
  agent's own calls. Neither: ``no_reference``.
- The regression task: the env's system prompt, the user's request, the catalog's tools offered or expected, the
  expected calls and the initial state as reference, the golden final state by replaying them
  (``EnvSpec.replay_reference``). Expected calls that fail, or whose replay does not score 1.0, are
  ``invalid_reference``.
- The agent's episode (its assistant messages' calls, in order) is replayed in a fresh session and scored by the
  current verifier; a failure becomes the task. A verifier pass on a failed outcome is flagged ``disagrees``.
"""

from __future__ import annotations

import json
from typing import Any

from flywheel.schemas import Message, Reference, Task, TaskMeta, ToolCall, ToolSpec
from flywheel.verifiers.envs import get_env


def _calls(tool_calls: Any) -> list[ToolCall]:
    out = []
    for tc in tool_calls or ():
        fn = tc.get("function", tc)
        args = fn.get("arguments", {})
        out.append(ToolCall(tool=fn["name"], args=json.loads(args) if isinstance(args, str) else args))
    return out


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
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        return row | {"bucket": "no_reference", "detail": f"unreadable corrected call: {exc!r}"[:300]}
    if not calls or user is None:
        return row | {"bucket": "no_reference", "detail": "no user request, correction or successful outcome"}
    offered = [t.get("function", t).get("name") for t in traj.tools]
    names = list(dict.fromkeys([n for n in offered if n] + [c.tool for c in calls]))
    unknown = [n for n in names if n not in catalog]
    if unknown:
        return row | {"bucket": "unknown_tool", "detail": f"not in the tool catalog: {', '.join(unknown)}"}
    fields = {"env": traj.env, "messages": (Message(role="system", content=spec.system_prompt),
                                            Message(role="user", content=user)),
              "tools": tuple(catalog[n] for n in names),
              "meta": TaskMeta(seed_id=f"prod:{traj.id}", generator="ingest", category="regression")}
    try:  # the id hashes the content: the task is built again with its golden final state
        task = Task(**fields, reference=spec.replay_reference(Task(**fields, reference=Reference(
            calls=calls, state=traj.state))))
    except ValueError as exc:
        return row | {"bucket": "invalid_reference", "detail": f"the expected calls do not replay: {exc}"[:300]}
    problem = spec.check_reference(task)
    if problem is not None:
        return row | {"bucket": "invalid_reference", "detail": f"{problem[0]}: {problem[1]}"[:300]}
    episode = json.dumps([m.model_dump(exclude_none=True) for m in traj.messages])
    return scored(row, traj, task, spec.verify(task, episode), user)
