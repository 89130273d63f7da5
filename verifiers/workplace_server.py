"""The workplace environment as a resources server, so agents in other processes can use it (like NeMo Gym's
resources servers).

Contract (JSON over HTTP, bind to 127.0.0.1):
- POST /seed_session {"task": <workplace Task>} -> {"session_id", "tools"}: a fresh isolated session per rollout.
- POST /<tool name> {"session_id", "args": {...}} -> {"observation"}: one endpoint per tool. An agent's bad
  call (wrong id, arguments that break the schema) is an error observation, as in process.
- POST /verify {"session_id", "close": true} -> the Verdict of the session's state now.
- GET /sessions/{id}/state -> the session's state; DELETE /sessions/{id}; GET /health.
- Malformed requests get 4xx with a message (422 bad body, 404 unknown session or tool, 400 a task that is not a
  workplace task, 429 too many open sessions), never a 500.
"""

from __future__ import annotations

import copy
import threading
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from schemas import Task
from verifiers.workplace import Session, score_session
from verifiers.workplace_tools import TOOLS


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


class Sessions:
    """Open sessions; one lock, since every tool call is microseconds of work."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.open: dict[str, Session] = {}

    def add(self, task: Task) -> str:
        if task.env != "workplace" or task.reference.state is None or task.reference.final_state is None:
            raise HTTPException(400, "seed_session needs a workplace task with reference.state and reference.final_state")
        with self.lock:
            if len(self.open) >= self.limit:
                raise HTTPException(429, f"{self.limit} sessions are open: verify with close=true or DELETE finished ones")
            session_id = uuid.uuid4().hex
            self.open[session_id] = Session.seeded(task)
        return session_id

    def get(self, session_id: str) -> Session:
        session = self.open.get(session_id)
        if session is None:
            raise HTTPException(404, f"no open session {session_id!r}: seed one with POST /seed_session")
        return session


def create_app(max_sessions: int = 10_000) -> FastAPI:
    app = FastAPI(title="flywheel workplace resources server")
    sessions = Sessions(max_sessions)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "sessions": len(sessions.open), "tools": sorted(TOOLS)}

    @app.post("/seed_session")
    def seed_session(req: SeedRequest) -> dict[str, Any]:
        return {"session_id": sessions.add(req.task), "tools": [t.name for t in req.task.tools]}

    def tool_endpoint(name: str):  # noqa: ANN202 - a route handler factory
        def call(req: ToolRequest) -> dict[str, Any]:
            with sessions.lock:
                return {"observation": sessions.get(req.session_id).call(name, req.args)}

        call.__name__ = f"tool_{name}"
        return call

    for name in sorted(TOOLS):
        app.post(f"/{name}", summary=f"Call the {name} tool in a session")(tool_endpoint(name))

    @app.post("/verify")
    def verify(req: VerifyRequest) -> dict[str, Any]:
        with sessions.lock:
            session = sessions.get(req.session_id)
            verdict = score_session(session.task, session)
            if req.close:
                del sessions.open[req.session_id]
        return verdict.model_dump(mode="json")

    @app.get("/sessions/{session_id}/state")
    def state(session_id: str) -> dict[str, Any]:
        with sessions.lock:
            return copy.deepcopy(sessions.get(session_id).state)  # serialized after the lock is released

    @app.delete("/sessions/{session_id}")
    def close(session_id: str) -> dict[str, str]:
        with sessions.lock:
            sessions.get(session_id)
            del sessions.open[session_id]
        return {"closed": session_id}

    return app
