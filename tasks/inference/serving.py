"""An OpenAI-compatible chat server for a local checkpoint (the embedded model by default): ``create_app``.

POST /v1/chat/completions takes OpenAI's fields (model, messages, tools, temperature, top_p, max_tokens, n, stop,
seed) and answers in OpenAI's response shape with token usage; the same request with the same seed gives the same
reply. The model has no native tool calling: tools are rendered into the system turn, and a reply that is a
``{"tool", "args"}`` object comes back as OpenAI ``tool_calls``, as vLLM's tool parsers do. GET /v1/models lists
the one served model. Bind it to 127.0.0.1 unless you mean to expose it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, Literal

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field, field_validator

from flywheel.tasks.inference.hf import HFChatModel
from flywheel.tasks.inference.protocol import as_text_chat, parse_action
from flywheel.verifiers.common import one_line
from flywheel.verifiers.web import guard

MAX_N = 16


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class CallFunction(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = "{}"


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    type: Literal["function"] = "function"
    function: CallFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None  # null in assistant turns that only call tools
    name: str | None = None
    tool_calls: list[ToolCall] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        if isinstance(value, list) and not all(isinstance(p, dict) and p.get("type") == "text" for p in value):
            raise ValueError("only text parts ({\"type\": \"text\", \"text\": ...}) are read: this model takes no "
                             "images, audio or files")
        return value

    def plain(self) -> dict[str, Any]:
        """The turn as ``as_text_chat`` reads it: text parts joined, OpenAI's newer "developer" role as system."""
        text = "".join(p.text for p in self.content) if isinstance(self.content, list) else self.content
        role = "system" if self.role == "developer" else self.role
        turn = {"role": role, "content": text} | ({"name": self.name} if self.name else {})
        return turn | ({"tool_calls": [c.model_dump() for c in self.tool_calls]} if self.tool_calls else {})


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function"] = "function"
    function: ToolFunction


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    max_tokens: int = Field(default=128, ge=1, le=2048)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stop: str | list[str] | None = Field(default=None)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    stream: bool = False

    def stops(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4 or not all(stops):
            raise HTTPException(400, "stop: up to 4 non-empty strings")
        return stops


def _cut(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string (not included), and whether one was found."""
    at = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:at], True) if at >= 0 else (text, False)


def _conversation(req: ChatRequest) -> list[dict[str, str]]:
    tools = [t.model_dump() for t in req.tools]
    try:
        return as_text_chat([m.plain() for m in req.messages], tools, agent=bool(tools))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a parameter schema that is not JSON Schema
        raise HTTPException(400, f"tools: a parameter schema that cannot be rendered ({one_line(exc)}): give each "
                                 "tool's parameters as a JSON Schema object with object-valued properties") from exc


def _choice(index: int, text: str, tokens: int, req: ChatRequest, stops: list[str]) -> dict[str, Any]:
    text, stopped = _cut(text, stops)
    calls = parse_action(text) if req.tools else None
    message = {"role": "assistant", "content": None, "tool_calls": calls} if calls else \
        {"role": "assistant", "content": text}
    finish = "tool_calls" if calls else "stop" if stopped or tokens < req.max_tokens else "length"
    return {"index": index, "message": message, "finish_reason": finish}


class Admission:
    """At most ``limit`` chat requests waiting for or holding the model at once; 503 beyond, so a flood of long
    requests is refused at once instead of queueing for ever. Keep ``limit`` under the server's 40 worker threads:
    a request is counted once a thread runs it."""

    def __init__(self, limit: int) -> None:
        self.limit, self.count, self.lock = limit, 0, threading.Lock()

    @contextmanager
    def slot(self) -> Generator[None, None, None]:
        with self.lock:
            if self.count >= self.limit:
                raise HTTPException(503, f"server busy: {self.limit} requests already wait for or hold the model "
                                         "(--max-waiting); retry later", headers={"Retry-After": "1"})
            self.count += 1
        try:
            yield
        finally:
            with self.lock:
                self.count -= 1


def create_app(model: HFChatModel, served_name: str, max_body_kb: int = 1024, max_waiting: int = 16) -> FastAPI:
    """The app serving ``model`` as ``served_name``. Earlier assistant tool calls and tool results are rendered into
    text turns; ``stop`` ends generation once the text holds a stop string, which is cut from the reply.

    Every bad request is a one-line 4xx, never a 500 (``verifiers.web.guard``): 413 a body over ``max_body_kb``, 422 a
    body that is not JSON or breaks the request model (NaN, a seed past 64 bits, a tool without a name, ...), 404 a
    model name this server does not serve, 400 ``stream`` (replies come whole), a prompt plus max_tokens past the
    model's context, or a tool schema that cannot be rendered; 503 with Retry-After when ``max_waiting`` requests
    already wait for or hold the model (one request generates at a time)."""
    app = guard(FastAPI(title="flywheel OpenAI-compatible server"), max_body_kb)
    admission = Admission(max_waiting)

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "flywheel"}]}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict:
        if req.model != served_name:
            raise HTTPException(404, f"model {req.model!r} is not served here; this server serves {served_name!r} "
                                     "(GET /v1/models)")
        if req.stream:
            raise HTTPException(400, "stream: this server answers whole replies; send stream false or leave it out")
        stops, conversation = req.stops(), _conversation(req)
        with admission.slot():
            try:
                replies = model.generate([conversation] * req.n, req.seed, req.temperature, req.top_p,
                                         req.max_tokens, labels=["the request"] * req.n, stop=stops)
            except ValueError as exc:  # the prompt plus max_tokens past the model's context
                raise HTTPException(400, one_line(exc, None)) from exc
        generated = sum(r.completion_tokens for r in replies)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": served_name,
            "choices": [_choice(i, r.text, r.completion_tokens, req, stops) for i, r in enumerate(replies)],
            "usage": {"prompt_tokens": replies[0].prompt_tokens, "completion_tokens": generated,
                      "total_tokens": replies[0].prompt_tokens + generated},
        }

    return app
