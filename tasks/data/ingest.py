"""The production flywheel's first half: logged trajectories -> re-scored, bucketed -> regression tasks.

``read_trajectories`` reads JSONL in the OpenAI chat format and fails on the first bad line: nothing is ingested
from a half-understood file. ``rescore`` scores the agent's first action with the current verifier, against a
human correction or a successful outcome, and puts the trajectory in a bucket. A scored failure becomes a held-out
regression Task: the user's request, the env's system prompt (as seeds render it), the catalog's tools named in
the trajectory, the corrected call as reference. Multi-step envs (workplace) are replayed whole:
``ingest_episodes.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from flywheel.schemas import Message, Reference, Task, TaskMeta, ToolCall, ToolSpec, canonical_json
from flywheel.schemas.records import Record, strict_json
from flywheel.tasks.data.ingest_episodes import rescore_episode, scored, tool_call, tool_names
from flywheel.tasks.data.quality import MAX_PROMPT_CHARS
from flywheel.tasks.data.seeds import first_error
from flywheel.verifiers import get_verifier
from flywheel.verifiers.envs import env_names, get_env

SUPPORTED_ENVS = tuple(name for name in env_names() if get_env(name).ingest)  # the spec's ``ingest``
MAX_LINE_BYTES = 1 << 20  # the workplace verifier's cap on an episode (MAX_CHARS); a tool_call line is a few KB


class Outcome(Record):
    success: bool | None = None
    error: str | None = None


class Intervention(Record):
    """A human stepping in: ``correction`` (the call the agent should have made), ``takeover`` or ``abort``."""

    message_index: int = Field(ge=0, description="the assistant message it replaces or stops")
    kind: Literal["correction", "takeover", "abort"]
    tool_calls: tuple[dict[str, Any], ...] = ()
    note: str = ""


class Trajectory(Record):
    id: str = Field(min_length=1)
    env: str = "tool_call"
    messages: tuple[Message, ...] = Field(min_length=2)
    tools: tuple[dict[str, Any], ...] = ()
    outcome: Outcome = Outcome()
    interventions: tuple[Intervention, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] | None = None  # multi-step envs: the environment's state when the episode started


class IngestError(ValueError):
    """The trajectories file cannot be ingested as is; the message names the line and what to fix."""


def read_trajectories(path: Path) -> list[Trajectory]:
    """One trajectory per line (``id``, ``env``, ``messages`` with ``tool_calls`` and ``tool`` observations,
    ``outcome``, ``interventions``); IngestError with the line number and the field on the first bad line. Lines are
    strict JSON (``schemas.records.strict_json``, as ``flywheel score`` reads them: no NaN, Infinity, out-of-range
    number or duplicate key) validated strictly (``"yes"`` is not a boolean), and at most ``MAX_LINE_BYTES`` each (the
    workplace verifier scores at most 1 MiB of episode): a longer line is refused before it is read whole."""
    if not path.is_file():
        raise IngestError(f"--trajectories {path}: no such file (JSONL, one OpenAI-format trajectory per line)")
    out, seen = [], set()
    with path.open("rb") as f:  # bytes: bad UTF-8 is reported with its line; a line over the cap is never read whole
        for n, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            line = line.rstrip(b"\r\n")
            if len(line) > MAX_LINE_BYTES:
                raise IngestError(f"{path}:{n}: the line is longer than {MAX_LINE_BYTES:,} bytes, the most one "
                                  "trajectory may take; trim it (its state, its observations) or leave it out")
            if not line.strip():
                continue
            try:
                strict_json(line)
                traj = Trajectory.model_validate_json(line, strict=True)
            except ValidationError as exc:
                raise IngestError(f"{path}:{n}: {first_error(exc)}") from None
            except ValueError as exc:
                raise IngestError(f"{path}:{n}: {exc}") from None
            if traj.id in seen:
                raise IngestError(f"{path}:{n}: trajectory id {traj.id!r} appears twice; ids must be unique")
            seen.add(traj.id)
            out.append(traj)
    if not out:
        raise IngestError(f"{path} has no trajectories")
    return out


def agent_completion(traj: Trajectory) -> tuple[int, str] | None:
    """The first assistant message (index, completion text as the policy would have written it)."""
    for i, m in enumerate(traj.messages):
        if m.role == "assistant":
            if m.tool_calls:
                call = tool_call(m.tool_calls[0])
                return i, canonical_json({"tool": call.tool, "args": call.args})
            return i, m.content or ""
    return None


def expected_calls(traj: Trajectory) -> tuple[ToolCall, ...]:
    fixes = [iv for iv in traj.interventions if iv.kind == "correction" and iv.tool_calls]
    if fixes:
        return tuple(tool_call(c) for c in fixes[0].tool_calls)
    first = next((m for m in traj.messages if m.role == "assistant"), None)
    if traj.outcome.success and not traj.interventions and first is not None and first.tool_calls:
        return tuple(tool_call(c) for c in first.tool_calls)
    return ()


def rescore(traj: Trajectory, catalog: dict[str, ToolSpec], env: str | None = None) -> dict[str, Any]:
    """One row: trajectory id, bucket, reward, detail and (for failures) the regression Task JSON. ``env``: the
    dataset's env; a trajectory of another env is bucketed ``other_env`` (its tasks cannot join this dataset).

    The expected call comes from a human correction (an intervention with ``tool_calls``) or, when the outcome says
    success and nobody intervened, from the agent's own call; without either: ``no_reference``. Buckets: ``passed``, a
    verifier failure class, ``no_reference``, ``unknown_tool``, ``invalid_reference`` (the corrected call does not
    itself score 1.0, e.g. breaks the tool's schema), ``unsupported_env``, ``other_env``, ``too_large`` (a user request
    longer than a generated task's prompt may be, ``MAX_PROMPT_CHARS``); ``disagrees`` marks a verifier pass on a
    failed outcome (a verifier gap to look at). A crafted call (arguments that are not a JSON object, nested deeper
    than ``protocol.MAX_DEPTH``, a number too long) is a bucketed row, never a crashed ingest."""
    row: dict[str, Any] = {"trajectory": traj.id, "env": traj.env, "bucket": "", "reward": None, "detail": "",
                           "disagrees": False, "task": None, "prompt": ""}
    if traj.env not in SUPPORTED_ENVS:
        return row | {"bucket": "unsupported_env", "detail": f"ingest supports {SUPPORTED_ENVS}"}
    if env is not None and traj.env != env:
        return row | {"bucket": "other_env", "detail": f"a {traj.env} trajectory; this dataset is {env}"}
    user = next((m.content for m in traj.messages if m.role == "user" and m.content), None)
    if user is not None and len(user) > MAX_PROMPT_CHARS:  # it would be a held-out task's prompt
        return row | {"bucket": "too_large", "detail": f"the user request has {len(user):,} characters; a regression "
                                                       f"task's prompt holds at most {MAX_PROMPT_CHARS:,}, as a "
                                                       "generated task's (the quality suite's max_prompt_chars)"}
    if get_env(traj.env).multi_turn:  # an episode: replayed whole (ingest_episodes.py)
        return rescore_episode(traj, catalog, row)
    try:
        action, calls = agent_completion(traj), expected_calls(traj)
    except ValueError as exc:  # pydantic's ValidationError and JSONDecodeError are ValueErrors
        return row | {"bucket": "no_reference", "detail": f"unreadable call: {exc}"[:300]}
    if not calls or user is None or action is None:
        return row | {"bucket": "no_reference",
                      "detail": "no user request, agent action, correction or successful outcome"}
    try:
        names = tool_names(traj.tools, calls)
    except ValueError as exc:
        return row | {"bucket": "unknown_tool", "detail": str(exc)[:300]}
    unknown = [n for n in names if n not in catalog]
    if unknown:
        return row | {"bucket": "unknown_tool", "detail": f"not in the tool catalog: {', '.join(unknown)}"}
    messages = (Message(role="system", content=get_env(traj.env).system_prompt), Message(role="user", content=user))
    try:
        task = Task(env=traj.env, messages=messages,
                    tools=tuple(catalog[n] for n in names), reference=Reference(calls=calls),
                    meta=TaskMeta(seed_id=f"prod:{traj.id}", generator="ingest", category="regression"))
    except ValueError as exc:  # pydantic's ValidationError: the corrected calls cannot make a task
        return row | {"bucket": "invalid_reference", "detail": f"the expected calls make no task: {exc}"[:300]}
    verifier = get_verifier(traj.env)
    own = verifier.verify(task, canonical_json({"tool": calls[0].tool, "args": calls[0].args}))
    if own.reward != 1.0:  # a correction the verifier itself rejects would make an unpassable task
        return row | {"bucket": "invalid_reference", "detail": f"the expected call scores {own.reward}: {own.details}"}
    return scored(row, traj, task, verifier.verify(task, action[1]), user)

