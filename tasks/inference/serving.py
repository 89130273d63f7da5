"""An OpenAI-compatible chat server for a local checkpoint (the embedded model by default).

Contract: POST /v1/chat/completions takes model, messages, tools, temperature,
top_p, max_tokens and seed (OpenAI's fields) and answers in OpenAI's response
shape with token usage; the same request with the same seed gives the same
reply. The model has no native tool calling: offered tools are rendered into
the system turn, earlier assistant tool calls and tool results into text turns,
and a reply that is a ``{"tool", "args"}`` object comes back as OpenAI
``tool_calls`` (finish_reason "tool_calls"), as vLLM's tool parsers do.
GET /v1/models lists the one served model. Bad requests get a 4xx with a
message. Bind it to 127.0.0.1 unless you mean to expose it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from flywheel.tasks.inference.hf import HFChatModel
from flywheel.tasks.inference.policy import as_text_chat, parse_action


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None  # null in assistant turns that only call tools


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=128, ge=1, le=2048)
    seed: int = Field(default=0, ge=0)


def create_app(model: HFChatModel, served_name: str) -> FastAPI:
    app = FastAPI(title="flywheel OpenAI-compatible server")

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "flywheel"}]}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict:
        conversation = as_text_chat([m.model_dump() for m in req.messages], req.tools, agent=bool(req.tools))
        reply = model.generate([conversation], req.seed, req.temperature, req.top_p, req.max_tokens)[0]
        calls = parse_action(reply.text) if req.tools else None
        message = {"role": "assistant", "content": None, "tool_calls": calls} if calls else \
            {"role": "assistant", "content": reply.text}
        finish = "tool_calls" if calls else "length" if reply.completion_tokens >= req.max_tokens else "stop"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": served_name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens},
        }

    return app
