"""The workplace environment as a resources server, so agents in other processes can use it (like NeMo Gym's
resources servers).

Contract (JSON over HTTP, bind to 127.0.0.1):
- POST /seed_session {"task": <workplace Task>} -> {"session_id", "tools"}: a fresh isolated session per rollout.
- POST /<tool name> {"session_id", "args": {...}} -> {"observation"}: one endpoint per tool. An agent's bad
  call (wrong id, arguments that break the schema) is an error observation, as in process.
- POST /verify {"session_id", "close": true} -> the Verdict of the session's state now.
- GET /sessions/{id}/state -> the session's state; DELETE /sessions/{id}; GET /health.
- Limits (``Limits``; ``flywheel serve-env`` options): a request body over ``max_body_kb`` gets 413 (the
  Content-Length is checked first; a chunked body is cut off once it passes the limit). A session holds at most
  ``max_session_kb`` of memory: its task, its state and its call log, sized by :func:`held_size` (compact JSON plus
  ``NODE_BYTES`` per value and per key, which tracks what Python holds: ``{"0": {}, "1": {}, ...}`` is ~10 bytes of
  JSON but ~150 bytes of objects per record). A task over it gets 413; a call that would pass it is an error
  observation and is not made. So the sessions' data stays under ``max_sessions x max_session_kb`` (the defaults,
  4096 x 256 KB, are 1 GiB; a shipped workplace task takes under 64 KB). Sessions untouched for ``session_ttl_s``
  are dropped, and every session is dropped ``session_max_age_s`` after it was seeded even if kept busy, so one
  client cannot hold the table for ever; their ids then get 404 saying they expired and why. At most
  ``max_sessions`` are open (429).
- Malformed requests get 4xx with a one-line message, never a 500: 422 a body that breaks the request model
  (the message names the field, the body is never echoed), 404 unknown or expired session or unknown tool,
  400 a task that is not a workplace task (no state, a state that is not {table: {id: record}}, a tool schema
  that does not compile), 422 a state that a tool or the scorer cannot work on, 413 too big, 429 too many
  open sessions.
- The global lock guards only the session table (dict operations); schema compilation, deep copies, tool
  calls and scoring run outside it (a tool call under its own session's lock), so one slow request never
  freezes the other sessions.
- No request holds one of the server's threads for long, however many a client sends at once: a tool call
  waits at most ``BUSY_WAIT_S`` for its session's lock and for a bounded-check worker (an untrusted tool's
  checks, ``verifiers.tool_checks``), then its observation says the environment is busy (retry; the call was
  not made); /verify and the state endpoints get 503 past that wait. GET /health runs on the event loop, off
  the thread pool.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from flywheel.schemas import Task
from flywheel.verifiers.common import one_line
from flywheel.verifiers.envs.workplace.workplace import score_session
from flywheel.verifiers.envs.workplace.workplace_sessions import (  # noqa: F401  (re-exported for callers and tests)
    BUSY,
    BUSY_WAIT_S,
    ENTRY_BYTES,
    EXPIRED_IDS_KEPT,
    NODE_BYTES,
    Limits,
    Sessions,
    Slot,
    capped_call,
    held_size,
    json_size,
    node_count,
    seeded_slot,
    state_problem,
)
from flywheel.verifiers.envs.workplace.workplace_tools import TOOLS
from flywheel.verifiers.web import guard


class SeedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: Task


class ToolRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str = Field(min_length=1)
    close: bool = True


def create_app(limits: Limits | None = None) -> FastAPI:
    limits = limits or Limits()
    cap = limits.max_session_kb * 1024
    app = FastAPI(title="flywheel workplace resources server")
    guard(app, limits.max_body_kb, "send a smaller task")
    sessions = Sessions(limits)

    @contextmanager
    def locked(slot: Slot) -> Iterator[None]:
        if not slot.lock.acquire(timeout=BUSY_WAIT_S):
            raise HTTPException(503, "the session is busy with other requests: retry")
        try:
            yield
        finally:
            slot.lock.release()

    @app.get("/health")
    async def health() -> dict[str, Any]:  # on the event loop: answers even when every worker thread is busy
        return {"status": "ok", "sessions": sessions.count(), "tools": sorted(TOOLS)}

    @app.post("/seed_session")
    def seed_session(req: SeedRequest) -> dict[str, Any]:
        slot = seeded_slot(req.task, cap)
        return {"session_id": sessions.add(slot), "tools": [t.name for t in req.task.tools]}

    def tool_endpoint(name: str):  # noqa: ANN202 - a route handler factory
        def call(req: ToolRequest) -> dict[str, Any]:
            slot = sessions.touch(req.session_id)
            if not slot.lock.acquire(timeout=BUSY_WAIT_S):
                return {"observation": {"error": BUSY}}
            try:
                return {"observation": capped_call(slot, name, req.args, cap)}
            finally:
                slot.lock.release()

        call.__name__ = f"tool_{name}"
        return call

    for name in sorted(TOOLS):
        app.post(f"/{name}", summary=f"Call the {name} tool in a session")(tool_endpoint(name))

    @app.post("/verify")
    def verify(req: VerifyRequest) -> dict[str, Any]:
        slot = sessions.touch(req.session_id)  # closed only once scored: a busy 503 must not lose the session
        with locked(slot):
            try:
                verdict = score_session(slot.session.task, slot.session)
            except Exception as exc:  # noqa: BLE001 - a crafted final state breaks the scorer in any way
                raise HTTPException(422, f"cannot score this session ({type(exc).__name__}: {one_line(exc)}): "
                                         "fix the task's reference.final_state") from None
        if req.close:
            with suppress(HTTPException):  # a concurrent DELETE or verify closed it first: the verdict stands
                sessions.touch(req.session_id, remove=True)
        return verdict.model_dump(mode="json")

    @app.get("/sessions/{session_id}/state")
    def state(session_id: str) -> dict[str, Any]:
        slot = sessions.touch(session_id)
        with locked(slot):
            return copy.deepcopy(slot.session.state)  # serialized after the session's lock is released

    @app.delete("/sessions/{session_id}")
    def close(session_id: str) -> dict[str, str]:
        sessions.touch(session_id, remove=True)
        return {"closed": session_id}

    return app
