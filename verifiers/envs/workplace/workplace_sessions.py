"""Sessions of the workplace resources server: size accounting, seeding and capped calls, the session table
with its TTL, caps and per-session locks (see ``workplace_server`` for the HTTP contract these back)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException

from flywheel.schemas import Task
from flywheel.verifiers.common import one_line
from flywheel.verifiers.envs.workplace.workplace import Session
from flywheel.verifiers.envs.workplace.workplace_tools import records_problem
from flywheel.verifiers.tool_checks import validator_for

NODE_BYTES = 96  # a value or key as a Python object beyond its JSON text (object header, dict slot, list pointer)
ENTRY_BYTES = 320  # one call-log entry beyond its arguments: a dict of five fields and an empty list
EXPIRED_IDS_KEPT = 65_536  # expired ids remembered so their 404 can say "expired"; oldest forgotten first
# The longest a request waits for its session's lock or a check worker: anyio runs the sync endpoints in ~40
# threads, so unbounded waits let one client's flood of slow checks hold every thread (and every session).
BUSY_WAIT_S = 1.0
BUSY = "the environment is busy: this call was not made; retry it"


@dataclass(frozen=True)
class Limits:
    max_sessions: int = 4096
    session_ttl_s: float = 600.0
    session_max_age_s: float = 3600.0
    max_body_kb: int = 256
    max_session_kb: int = 256


def json_size(value: Any) -> int:
    """Characters of ``value`` as compact JSON."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def node_count(value: Any) -> int:
    """Values and keys in ``value`` (a JSON tree), counted without recursion so any depth is safe."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            count += len(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def held_size(value: Any) -> int:
    """What a session is charged for holding ``value``: its compact JSON plus ``NODE_BYTES`` per value and key.
    Compact JSON alone undercounts small containers up to ~20x (an empty record is 2 characters, ~150 bytes in
    Python). Measured with tracemalloc on parsed states of empty records, empty lists, short strings and small
    records (100 to 30,000 of them, dict resizes included), a value or key never cost more than 79 bytes beyond its
    JSON, so this is at or over what a parsed copy takes; it overcounts long strings and small numbers."""
    return json_size(value) + NODE_BYTES * node_count(value)


def state_problem(name: str, state: Any) -> str | None:
    """Why ``state`` is not a workplace state ({table: {id: record object}}), or None."""
    if not isinstance(state, dict):
        return f"reference.{name} must be an object of tables"
    for table, records in state.items():
        if not isinstance(records, dict):
            return f"reference.{name}.{table} must be an object from record id to record"
        for rid, record in records.items():
            if not isinstance(record, dict):
                return f"reference.{name}.{table}.{rid} must be an object (a record)"
    return None


@dataclass
class Slot:
    """One open session, its own lock, when it was seeded and last touched and the bytes it is charged for: its
    task (fixed), its state and its call log."""

    session: Session
    task_bytes: int
    state_bytes: int
    log_bytes: int = 0
    born: float = 0.0
    touched: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def held(self) -> int:
        return self.task_bytes + self.state_bytes + self.log_bytes


def seeded_slot(task: Task, cap: int) -> Slot:
    """A fresh session for ``task``, checked and sized; raises HTTPException 400 for a task it cannot serve, 413
    for one whose task and state would pass ``cap`` bytes (checked before the state is copied). Runs outside the
    global lock: compiling the tools' schemas and copying the state are the slow parts."""
    ref = task.reference
    if task.env != "workplace" or ref.state is None or ref.final_state is None:
        raise HTTPException(400, "seed_session needs a workplace task with reference.state and reference.final_state")
    problem = state_problem("state", ref.state) or state_problem("final_state", ref.final_state)
    if problem:
        raise HTTPException(400, f"not a workplace task: {problem}")
    try:
        task_bytes, state_bytes = held_size(task.model_dump(mode="json")), held_size(ref.state)
    except (RecursionError, ValueError, TypeError) as exc:
        raise HTTPException(400, f"reference.state cannot be read as JSON: {one_line(exc)}") from None
    if task_bytes + state_bytes > cap:
        raise HTTPException(413, f"the task and its state take {(task_bytes + state_bytes) // 1024} KB held, over the "
                                 f"{cap // 1024} KB session limit (--max-session-kb): sized as JSON plus {NODE_BYTES} "
                                 "bytes per value and key; send a smaller reference.state or raise the limit")
    problem = records_problem("state", ref.state)  # every table, and the fields the tools read (sized first)
    if problem:
        raise HTTPException(400, f"not a workplace task: {problem}")
    for spec in task.tools:  # compiled now (and cached) so a bad schema fails here, not in the middle of a rollout
        try:
            validator_for(spec.parameters)
        except Exception as exc:  # noqa: BLE001 - whatever the compiler raises on a crafted schema
            raise HTTPException(400, f"tool {spec.name!r}: parameters are not a usable JSON Schema: "
                                     f"{one_line(exc)}") from None
    try:
        return Slot(session=Session.seeded(task, wait_s=BUSY_WAIT_S), task_bytes=task_bytes, state_bytes=state_bytes)
    except (RecursionError, ValueError, TypeError) as exc:
        raise HTTPException(400, f"reference.state cannot be copied as JSON: {one_line(exc)}") from None


def capped_call(slot: Slot, tool: str, args: dict[str, Any], cap: int) -> dict[str, Any]:
    """The observation of one call in ``slot``'s session, or an error observation when the call would grow the
    session past ``cap`` bytes (the call is then neither made nor logged). Call under ``slot.lock``."""
    refused = {"error": f"the session would grow past its {cap // 1024} KB limit (--max-session-kb): "
                        "this call was not made; verify or close the session"}
    entry = held_size(args) + ENTRY_BYTES
    if slot.held + entry > cap:
        return refused
    # A tool adds at most its arguments and a copy of one existing record, so only a call that could pass the cap
    # pays for a snapshot to undo it (its state and what the session recorded of its effects).
    undo = slot.session.checkpoint() if slot.held + slot.state_bytes + 2 * entry > cap else None
    slot.log_bytes += entry
    try:
        observation = slot.session.call(tool, args)
        state_bytes = held_size(slot.session.state)
    except Exception as exc:  # noqa: BLE001 - a crafted state breaks a tool in any way; the task is at fault
        raise HTTPException(422, f"tool {tool!r} cannot work on this session's state ({type(exc).__name__}: "
                                 f"{one_line(exc)}): fix the task's reference.state") from None
    # refused as the pre-check refuses: not made, not logged
    if undo is not None and slot.task_bytes + state_bytes + slot.log_bytes > cap:
        slot.session.rollback(undo)
        slot.log_bytes -= entry
        return refused
    slot.state_bytes = state_bytes
    return observation


class Sessions:
    """Open sessions, least recently touched first, and their seeding times, oldest first; the lock covers
    dictionary operations only."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.lock = threading.Lock()
        self.open: OrderedDict[str, Slot] = OrderedDict()
        self.born: OrderedDict[str, float] = OrderedDict()  # seeding order is age order: the clock is monotonic
        self.expired: OrderedDict[str, str] = OrderedDict()  # id -> why, for the 404

    def _expire(self, session_id: str, why: str) -> None:
        del self.open[session_id]
        del self.born[session_id]
        self.expired[session_id] = why
        if len(self.expired) > EXPIRED_IDS_KEPT:
            self.expired.popitem(last=False)

    def _drop_expired(self, now: float) -> None:
        """Drop sessions past their maximum age, then those untouched for the TTL; amortized O(1) since both
        tables keep the oldest first. Call under the lock."""
        while self.born:
            session_id, born = next(iter(self.born.items()))
            if now - born < self.limits.session_max_age_s:
                break
            self._expire(session_id, f"expired at its {self.limits.session_max_age_s:g} s age limit "
                                     "(--session-max-age)")
        while self.open:
            session_id, slot = next(iter(self.open.items()))
            if now - slot.touched < self.limits.session_ttl_s:
                break
            self._expire(session_id, f"expired after {self.limits.session_ttl_s:g} s idle")

    def add(self, slot: Slot) -> str:
        with self.lock:
            now = self.clock()
            self._drop_expired(now)
            if len(self.open) >= self.limits.max_sessions:
                raise HTTPException(429, f"{self.limits.max_sessions} sessions are open: verify with close=true or "
                                         "DELETE finished ones "
                                         f"(idle ones expire after {self.limits.session_ttl_s:g} s, "
                                         f"every one {self.limits.session_max_age_s:g} s after it was seeded)")
            session_id = uuid.uuid4().hex
            slot.born = slot.touched = now
            self.open[session_id] = slot
            self.born[session_id] = now
        return session_id

    def touch(self, session_id: str, remove: bool = False) -> Slot:
        """The open session ``session_id``, marked as used now (or removed); 404 when unknown or expired."""
        with self.lock:
            now = self.clock()
            self._drop_expired(now)
            slot = self.open.pop(session_id, None) if remove else self.open.get(session_id)
            if slot is None:
                why = self.expired.get(session_id)
                if why is not None:
                    raise HTTPException(404, f"session {session_id!r} {why}: seed a new one with POST /seed_session")
                raise HTTPException(404, f"no open session {session_id!r}: seed one with POST /seed_session")
            if remove:
                del self.born[session_id]
            else:
                slot.touched = now
                self.open.move_to_end(session_id)
        return slot

    def count(self) -> int:
        with self.lock:
            self._drop_expired(self.clock())
            return len(self.open)
