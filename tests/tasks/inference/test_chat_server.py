"""Crafted requests against `flywheel serve` (the OpenAI-compatible chat server), on a real server on 127.0.0.1:
every bad request is a one-line 4xx, never a 500 (a prompt past the model's context, a tool schema the prompt
cannot render, NaN, a seed past 64 bits and an assistant call without a function were 500s; a 20 MB body was
tokenized for 37 s before its 500), and fields the server used to drop without a word (n, stop, stream, another
model's name) are served or refused."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from conftest import cli_server, one_line_error

pytestmark = [pytest.mark.slow, pytest.mark.server]
HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def _with(**fields: Any) -> dict[str, Any]:
    return {"model": "smol", "messages": HI, "max_tokens": 4, **fields}


CRAFTED = [
    (_with(messages=[{"role": "user", "content": "word " * 9000}]), 400, "exceed the model's context of 8192"),
    (_with(stream=True), 400, "stream: this server answers whole replies"),
    (_with(model="gpt-4o"), 404, "model 'gpt-4o' is not served here; this server serves 'smol'"),
    (_with(n=17), 422, "n: Input should be less than or equal to 16"),
    (_with(stop=["a", "b", "c", "d", "e"]), 400, "stop: up to 4 non-empty strings"),
    (_with(stop=""), 400, "stop: up to 4 non-empty strings"),
    (_with(seed=2**70), 422, "seed: Input should be less than or equal to"),
    (_with(tools=[{"type": "function"}]), 422, "tools.0.function: Field required"),
    (_with(tools=[{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": 5}}}}]), 400,
     "tools: a parameter schema that cannot be rendered"),
    (_with(tools=[{"type": "function", "function": {"name": "f", "parameters": {"properties": [1]}}}]), 400,
     "tools: a parameter schema that cannot be rendered"),
    (_with(messages=[{"role": "assistant", "content": None, "tool_calls": [{"x": 1}]}]), 422,
     "messages.0.tool_calls.0.function: Field required"),
    (_with(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 422,
     "only text parts"),
]


@pytest.mark.parametrize(("body", "status", "fragment"), CRAFTED)
def test_crafted_chat_requests_get_one_line_4xx(model_server, body, status, fragment) -> None:
    one_line_error(httpx.post(f"{model_server}/chat/completions", json=body, timeout=60), status, fragment)


def test_unreadable_deep_and_oversized_bodies_get_one_line_4xx_without_being_read(model_server) -> None:
    url, json_type = f"{model_server}/chat/completions", {"content-type": "application/json"}
    nan = '{"model": "smol", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'
    one_line_error(httpx.post(url, content=nan, headers=json_type), 422, "temperature: Input should be a finite")
    deep = '{"model": "smol", "messages": [], "tools": [' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]}"
    one_line_error(httpx.post(url, content=deep, headers=json_type), 400, "nested too deeply")
    one_line_error(httpx.post(url, content="{nope", headers=json_type), 422, "the body is not JSON")
    big = _with(messages=[{"role": "user", "content": "x" * 2_000_000}])
    one_line_error(httpx.post(url, json=big, timeout=30), 413, "1024 KB limit (--max-body-kb)")  # chunked: serve-env
    assert httpx.get(f"{model_server}/models", timeout=10).json()["data"][0]["id"] == "smol"  # still up


def test_n_stop_text_parts_and_tool_turns_are_served_as_openai_does(model_server) -> None:
    url = f"{model_server}/chat/completions"

    def choices(**fields: Any) -> list[dict[str, Any]]:
        response = httpx.post(url, json=_with(**fields), timeout=120)
        assert response.status_code == 200, response.text
        return response.json()["choices"]

    sampled = choices(n=3, temperature=1.0, max_tokens=8, seed=5)
    assert [c["index"] for c in sampled] == [0, 1, 2] and len({c["message"]["content"] for c in sampled}) > 1
    assert choices(n=3, temperature=1.0, max_tokens=8, seed=5) == sampled  # same seed, same replies
    greedy = choices(temperature=0.0, max_tokens=8)[0]["message"]["content"]
    parts = [{"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}]
    assert choices(messages=parts, temperature=0.0, max_tokens=8)[0]["message"]["content"] == greedy
    word = greedy.split()[1]
    cut = httpx.post(url, json=_with(temperature=0.0, max_tokens=8, stop=[word]), timeout=120).json()
    assert cut["choices"][0]["finish_reason"] == "stop" and cut["choices"][0]["message"]["content"] == \
        greedy[:greedy.index(word)]
    assert cut["usage"]["completion_tokens"] < 8  # the stop string ended generation, not the token limit
    turns = [*HI, {"role": "assistant", "content": None,
                   "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "tool", "name": "f", "content": "done"}]
    assert choices(messages=turns, tools=[TOOL], temperature=0.0)  # earlier calls and results are read, not a 500


def test_a_flood_past_max_waiting_is_refused_with_503_and_every_slot_comes_back() -> None:
    """One request generates at a time; before --max-waiting, a flood of long requests queued for ever."""
    with cli_server(["serve", "--name", "smol", "--max-waiting", "2"], "/v1/models") as base:
        url = f"{base}/v1/chat/completions"
        story = _with(max_tokens=24, temperature=0.0, messages=[{"role": "user", "content": "Tell me a long story."}])
        with ThreadPoolExecutor(4) as pool:  # 2 admitted (one generates for seconds), 2 refused at once
            answers = list(pool.map(lambda _: httpx.post(url, json=story, timeout=300), range(4)))
        assert {a.status_code for a in answers} == {200, 503}, [a.status_code for a in answers]
        busy = next(a for a in answers if a.status_code == 503)
        one_line_error(busy, 503, "server busy: 2 requests already wait for or hold the model (--max-waiting)")
        assert busy.headers["retry-after"] == "1"
        long = _with(messages=[{"role": "user", "content": "word " * 9000}])
        for _ in range(3):  # a refused request gives its slot back too
            one_line_error(httpx.post(url, json=long, timeout=60), 400, "exceed the model's context")
        assert [httpx.post(url, json=_with(), timeout=60).status_code for _ in range(3)] == [200] * 3
