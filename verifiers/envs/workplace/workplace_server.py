"""The workplace environment as a resources server, so agents in other processes can use it (like NeMo Gym's
resources servers).

JSON over HTTP, bound to 127.0.0.1:
- POST /seed_session {"task"} -> {"session_id", "tools"}: a fresh isolated session per rollout.
- POST /<tool name> {"session_id", "args"} -> {"observation"}: one endpoint per tool; a bad call is an error
  observation, as in process.
- POST /verify {"session_id", "close": true} -> the Verdict of the session's state now.
- GET /sessions/{id}/state; DELETE /sessions/{id}; GET /health.
- ``Limits`` bound request bodies, each session's held memory, idle and total session age and the number of open
  sessions; malformed requests get a one-line 4xx, never a 500; no request holds a server thread for long
  (``BUSY_WAIT_S``, then a busy observation or 503). Details: this env's README.md.
"""

from __future__ import annotations

import copy
from collections.abc import Generator
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
    def locked(slot: Slot) -> Generator[None, None, None]:
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
