"""`flywheel serve`'s request model as the prompt renderer reads it (pure; the server itself is in
tests/tasks/inference/test_chat_server.py)."""

from __future__ import annotations

from flywheel.tasks.inference.protocol import as_text_chat
from flywheel.tasks.inference.serving import ChatRequest


def _turns(messages: list[dict]) -> list[dict[str, str]]:
    req = ChatRequest.model_validate({"model": "m", "messages": messages})
    return as_text_chat([m.plain() for m in req.messages], [], agent=False)


def test_turns_render_as_openai_clients_send_them() -> None:
    turns = _turns([
        {"role": "developer", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "done"},  # OpenAI's tool turns carry no name
        {"role": "tool", "name": "g", "content": "also done"},
    ])
    assert turns == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                     {"role": "assistant", "content": '{"tool": "f", "args": {"a": 1}}'},
                     {"role": "user", "content": "Result of tool: done"},
                     {"role": "user", "content": "Result of g: also done"}]
