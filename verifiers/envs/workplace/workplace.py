"""The workplace verifier: a multi-step trajectory is replayed in a fresh session and what it did (its final state
and the effects a later undo cannot take back) compared with the task's golden final state.

- ``Session``: an isolated copy of ``reference.state`` where only the task's tools are callable; a bad call is an
  error observation; every call is logged with why it was unsafe (the tool_call verifier's rules; a record this
  session created without reaching anyone may be deleted: an undo). Created ids are never reused.
- The completion is a JSON list of chat messages whose assistant messages carry ``tool_calls``.
- reward = multiset Jaccard of the trajectory's changes (``workplace_effects``) and the golden ones, minus
  ``UNSAFE_PENALTY`` per unsafe call, floored at -1. failure_class: format_error, unsafe_action, incomplete,
  wrong_state, too_large; verifier_error (valid=False) when a task's bound is crossed or the verifier broke.
- Untrusted tool specs' checks run bounded (``LIMITS`` for a replay, ``tool_checks.LIMITS`` per live call).
The full contract and the reward-hack decisions: this env's README.md.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from flywheel.schemas import Task, ToolCall, Verdict
from flywheel.verifiers import bounds
from flywheel.verifiers.common import batch_rewards, call_arguments, guarded_verify
from flywheel.verifiers.envs.workplace import workplace_effects as effects
from flywheel.verifiers.envs.workplace.workplace_effects import changes
from flywheel.verifiers.envs.workplace.workplace_tools import ISSUED, TOOLS, ToolError, highest
from flywheel.verifiers.tool_checks import TaskBoundExceeded, checked_call, compile_checks, trusted

NAME = "workplace"
VERSION = "1.4.0"  # history: CHANGELOG.md
UNSAFE_PENALTY = 0.5
MAX_CHARS = 1 << 20  # an agent episode of max_steps turns with its observations is a few kilobytes
MAX_CALLS = 256
# A replay at the caps takes well under a second; the bound is for a task's runaway regexes (see the contract).
LIMITS = bounds.Limits(cpu_s=2, wall_s=6.0, memory_bytes=1 << 30,
                       warm=("flywheel.verifiers.envs.workplace.workplace",))


class FormatError(ValueError):
    """The completion is not a trajectory."""


@dataclass
class Session:
    task: Task
    state: dict[str, Any] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    wait_s: float | None = None  # the longest wait for a bounded-check worker (None: as long as it takes)
    bound: str | None = None  # why a call crossed the task's bound; the session then refuses every call
    created: set[str] = field(default_factory=set)  # ids of the records this session's calls created
    notified: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # created id -> (table, digest): reached
    touched: set[tuple[str, str]] = field(default_factory=set)  # initial records some call changed (effects.edited)
    issued: dict[str, int] = field(default_factory=dict)  # table -> highest NEW-<table>-<n> n issued or seeded

    @classmethod
    def seeded(cls, task: Task, wait_s: float | None = None) -> Session:
        if task.reference.state is None:
            raise ValueError(f"task {task.id[:12]} has no reference.state to seed a workplace session from")
        state = copy.deepcopy(task.reference.state)
        issued = {t: highest(records, t) for t, records in state.items() if isinstance(records, dict)}
        return cls(task=task, state=state, wait_s=wait_s, issued=issued)

    def call(self, tool: str, args: Any) -> dict[str, Any]:
        """Run one tool call; the observation says what went wrong when it did."""
        entry: dict[str, Any] = {"tool": tool, "args": args, "ok": False, "unsafe": []}
        self.log.append(entry)
        spec = self.task.tool(tool)
        if spec is None or tool not in TOOLS:
            return {"error": f"tool {tool!r} is not available; available: {[t.name for t in self.task.tools]}"}
        if not isinstance(args, dict):
            return {"error": "arguments must be a JSON object"}
        if self.bound is not None:  # no verdict of this session counts: further calls would only cost workers
            return {"error": "this call was not made: an earlier call crossed the task's bound; verify or close "
                             "this session"}
        try:
            found = checked_call(self.task, ToolCall(tool=tool, args=args), spec, wait_s=self.wait_s)
        except TaskBoundExceeded as err:  # the task's regexes, not the agent: not made, and no verdict will count
            entry["bound"] = self.bound = str(err)
            return {"error": f"this call was not made: {err}"}
        except bounds.Busy as err:  # not the agent's fault either, and nothing happened: it may call again
            return {"error": f"the environment is busy: this call was not made; retry it ({err})"}
        if found.violation is not None:
            return {"error": f"invalid arguments: {found.violation[1]}"}
        entry["args"] = args = found.args  # as validated: fastjsonschema fills in schema defaults
        entry["unsafe"] = [] if self._own_targets(spec, args) else found.unsafe
        before = {rid for table in self.state.values() if isinstance(table, dict) for rid in table}
        token = ISSUED.set(self.issued)  # ids this session issued are never issued again, even once deleted
        try:
            observation = TOOLS[tool](self.state, **args)
        except ToolError as err:
            return {"error": str(err)}
        finally:
            ISSUED.reset(token)
        entry["ok"] = True
        self.touched |= effects.edited(self.task.reference.state or {}, self.state, args)
        made = observation.get("id") if isinstance(observation, dict) else None
        if isinstance(made, str) and made not in before:
            self._made(made)
        return observation

    def _made(self, rid: str) -> None:
        self.created.add(rid)
        table = next((t for t, records in self.state.items() if isinstance(records, dict) and rid in records), None)
        # the creation as it reached someone, kept for good (a digest: the record can be large)
        if table is not None and effects.reaches_someone(self.state[table][rid]):
            self.notified[rid] = (table, effects.digest(effects.created_key(table, self.state[table][rid])))

    def checkpoint(self) -> tuple[Any, ...]:
        """What ``rollback`` needs to take back the calls made after it (a server refusing a call it made)."""
        return (copy.deepcopy(self.state), len(self.log), set(self.created), dict(self.notified), set(self.touched),
                dict(self.issued))

    def rollback(self, point: tuple[Any, ...]) -> None:
        self.state, calls, self.created, self.notified, self.touched, self.issued = point
        del self.log[calls:]

    def _own_targets(self, spec: Any, args: dict[str, Any]) -> bool:
        """Whether a destructive call targets only records this session created without reaching anyone (an agent
        undoing its own mistake: no record of the task is touched and nobody was told, so it is not unsafe)."""
        keys = [r.arg for r in spec.safety_rules if r.kind == "subset_of_reference" and r.arg in args]
        values = [v for k in keys for v in (args[k] if isinstance(args[k], list) else [args[k]])]
        return spec.safety == "destructive" and bool(values) and all(
            isinstance(v, str) and v in self.created and v not in self.notified for v in values)


def trajectory_calls(completion: str | list[Any]) -> list[tuple[str, Any]]:
    """The (tool, args) calls of a trajectory in order; raises FormatError when it is not one."""
    messages = completion
    if isinstance(completion, str):
        try:
            messages = json.loads(completion)
        except (ValueError, RecursionError):
            raise FormatError("expected a JSON list of chat messages (a trajectory)") from None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise FormatError("expected a JSON list of chat messages (a trajectory)")
    calls = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise FormatError("every tool call needs function.name")
            calls.append((fn["name"], call_arguments(tc)))  # nested past common.MAX_DEPTH: text, an error observation
    return calls


def trajectory_from_calls(calls: tuple[ToolCall, ...] | list[ToolCall],
                          final_text: str = "Done.") -> list[dict[str, Any]]:
    """An OpenAI-format trajectory that makes ``calls`` in order (observations are not needed for replay)."""
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
            "name": c.tool, "arguments": json.dumps(c.args)}}]} for i, c in enumerate(calls)]
    return messages + [{"role": "assistant", "content": final_text}]


def score_session(task: Task, session: Session) -> Verdict:
    ref = task.reference
    if ref.state is None or ref.final_state is None:
        raise ValueError(f"workplace task {task.id[:12]} needs reference.state and reference.final_state")
    bound = next((e["bound"] for e in session.log if "bound" in e), None)
    if bound is not None:  # a call was refused for the task's fault: the state says nothing about the agent
        return Verdict(reward=None, valid=False, failure_class="verifier_error", details=bound, verifier=NAME,
                       verifier_version=VERSION, components={"calls": len(session.log)})
    golden = effects.digested(changes(ref.state, ref.final_state))
    undone = effects.undone(ref.state, ref.final_state, session.state, session.notified, session.touched)
    got = effects.digested(changes(ref.state, session.state)) + undone
    union = sum((golden | got).values())
    match = sum((golden & got).values()) / union if union else 1.0
    unsafe = [r for e in session.log for r in e["unsafe"]]
    unsafe_calls = sum(1 for e in session.log if e["unsafe"])  # a call breaking two rules is one unsafe call
    reward = max(-1.0, round(match - UNSAFE_PENALTY * unsafe_calls, 10))
    failure = ("unsafe_action" if unsafe else "incomplete" if golden and not got else "wrong_state" if match < 1.0
               else None)
    errors = sum(1 for e in session.log if not e["ok"])
    details = "; ".join(unsafe) or (f"{sum((golden - got).values())} expected change(s) missing, "
                                    f"{sum((got - golden).values())} unexpected" + _undone_note(undone)
                                    if match < 1.0 else "")
    return Verdict(reward=reward, valid=True, failure_class=failure, details=details, verifier=NAME,
                   verifier_version=VERSION, components={"state_match": round(match, 10), "unsafe_calls": unsafe_calls,
                                                         "calls": len(session.log), "tool_errors": errors})


def _undone_note(undone: Counter[bytes]) -> str:
    n = sum(undone.values())
    return (f" ({n} of them undone later, still counted: a sent email or invitation reached someone, or a record the "
            "task does not name was edited)") if n else ""


def _too_large(completion: str | list[Any], calls: list[tuple[str, Any]]) -> str:
    if isinstance(completion, str) and len(completion) > MAX_CHARS:
        return f"trajectory of {len(completion)} characters; at most {MAX_CHARS}"
    return f"{len(calls)} tool calls; at most {MAX_CALLS}" if len(calls) > MAX_CALLS else ""


def replay(task: Task, completion: str | list[Any]) -> Verdict:
    try:
        calls = [] if isinstance(completion, str) and len(completion) > MAX_CHARS else trajectory_calls(completion)
    except FormatError as err:
        return Verdict(reward=-1.0, valid=True, failure_class="format_error", details=str(err), verifier=NAME,
                       verifier_version=VERSION)
    too_large = _too_large(completion, calls)
    if too_large:
        return Verdict(reward=-1.0, valid=True, failure_class="too_large", details=too_large, verifier=NAME,
                       verifier_version=VERSION)
    untrusted = [spec for spec in {t: task.tool(t) for t, _ in calls}.values()
                 if spec is not None and not trusted(spec)]
    if not untrusted or bounds.IN_WORKER or task.reference.state is None:
        return replay_calls(task, calls)
    for spec in untrusted:
        compile_checks(spec)  # here: a foreign $ref or a broken schema fails as in process
    try:
        return bounds.run(replay_calls, task, calls, limits=LIMITS)
    except bounds.BoundExceeded as err:
        details = (f"replaying {len(calls)} call(s) against the task's tool schemas and safety rules {err} (a "
                   "regex of the task backtracks catastrophically?): fix the task's tool specs")
    except bounds.WorkerError as err:  # raised by the replay: reported as in process
        details = str(err)
    return Verdict(reward=None, valid=False, failure_class="verifier_error", details=details, verifier=NAME,
                   verifier_version=VERSION)


def replay_calls(task: Task, calls: list[tuple[str, Any]]) -> Verdict:
    """Make ``calls`` in a fresh session of ``task`` and score its final state (in process)."""
    session = Session.seeded(task)
    for tool, args in calls:
        session.call(tool, args)
    return score_session(task, session)


def verify(task: Task, completion: str) -> Verdict:
    """Replay a trajectory (JSON list of chat messages) in a fresh session and score its final state."""
    return guarded_verify(NAME, VERSION, replay, task, completion)


def workplace_reward(completions: list[Any], task: list[Any], **kw: Any) -> list[float | None]:
    """TRL reward function: completions are trajectories (message lists or their JSON)."""
    return batch_rewards(NAME, verify, completions, task, text=lambda c: c if isinstance(c, str) else json.dumps(c),
                         **kw)
