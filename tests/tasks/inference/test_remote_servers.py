"""Hostile or broken servers that flywheel calls as a client: an OpenAI-compatible policy server (the `openai`
backend of `flywheel eval`) and a workplace resources server (agent episodes through `serve-env`). A reply trickled
a byte at a time is cut off at its deadline (httpx's timeout is per read, so it stalled an eval for ever), a reply
over the size cap is refused without being held, and an answer of the wrong shape is one clear error, not a
KeyError from deep inside the eval."""

from __future__ import annotations

import time

import pytest

from conftest import raw_http_server, within
from flywheel.schemas import Task
from flywheel.tasks.agents.agent import HTTPEnv
from flywheel.tasks.inference.backends import OpenAIBackend
from flywheel.tasks.inference.protocol import Request, Sampling
from flywheel.verifiers.fetch import MAX_REPLY_BYTES

HI = Request([{"role": "user", "content": "hi"}])


def test_a_trickled_reply_is_cut_off_at_its_deadline() -> None:
    with raw_http_server(trickle=True) as base:
        backend = OpenAIBackend(base, "m", timeout_s=1, retries=1)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="failed after 2 tries: no complete reply within 1 s"):
            within(20, lambda: backend.generate([HI], Sampling()))
    assert time.monotonic() - started < 2 * 1 + 0.5 + 3


def test_a_reply_over_the_cap_is_refused_without_a_retry() -> None:
    size = MAX_REPLY_BYTES + 1_000_000
    with raw_http_server(b" " * size) as base:
        backend = OpenAIBackend(base, "m", timeout_s=30, retries=3)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=f"reply larger than {MAX_REPLY_BYTES} bytes"):
            within(30, lambda: backend.generate([HI], Sampling()))
    assert time.monotonic() - started < 10  # no backoff: a broken server does not heal in 3.5 s


@pytest.mark.parametrize(("body", "fragment"), [
    (b"<html>gateway</html>", "Invalid JSON"),
    (b"[]", "Input should be an object"),
    (b'{"choices": []}', "choices: List should have at least 1 item"),
    (b'{"choices": [{"message": {"tool_calls": [{"function": 5}]}}]}', "choices.0.message.tool_calls.0.function"),
    (b'{"choices": [{"message": {"content": 7}}]}', "choices.0.message.content"),
    (b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -3}}', "usage.prompt_tokens"),
])
def test_an_answer_that_is_not_a_chat_completion_is_one_clear_error(body, fragment) -> None:
    with raw_http_server(body) as base:
        with pytest.raises(RuntimeError, match="the server's answer is not an OpenAI chat completion") as caught:
            within(20, lambda: OpenAIBackend(base, "m", timeout_s=5, retries=0).generate([HI], Sampling()))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_minimal_answer_reads_with_defaults() -> None:
    body = (b'{"choices": [{"message": {"content": null, "tool_calls": [{"function": {"name": "f", "arguments": '
            b'"{}"}}]}}], "usage": null, "extra": {"ignored": true}}')
    with raw_http_server(body) as base:
        gen = within(20, lambda: OpenAIBackend(base, "m", timeout_s=5, retries=0).generate([HI], Sampling()))[0]
    assert (gen.text, gen.prompt_tokens, gen.completion_tokens, gen.finish_reason) == ("", 0, 0, "stop")
    assert gen.tool_calls == [{"id": None, "type": "function", "function": {"name": "f", "arguments": "{}"}}]


TASK = Task.model_validate({"env": "judge", "messages": [{"role": "user", "content": "q"}],
                            "reference": {"answer": "a"}, "meta": {"seed_id": "hostile"}})


def test_an_env_server_that_trickles_is_cut_off_at_its_deadline() -> None:
    with raw_http_server(trickle=True) as base:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="workplace server /seed_session: ReadTimeout: no complete reply"):
            within(20, lambda: HTTPEnv(base, timeout_s=1).seed(TASK))
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("body", "fragment"), [
    (b"[1, 2]", "/seed_session: the answer is not a JSON object with session_id, tools: [1, 2]"),
    (b'{"session_id": "s"}', "/seed_session: the answer is not a JSON object with session_id, tools"),
    (b"\xff\xfe", "/seed_session: the answer is not a JSON object"),
])
def test_an_env_answer_of_the_wrong_shape_is_one_clear_error(body, fragment) -> None:
    with raw_http_server(body) as base:
        with pytest.raises(RuntimeError, match="workplace server") as caught:
            within(20, lambda: HTTPEnv(base, timeout_s=5).seed(TASK))
    assert fragment in str(caught.value)


@pytest.mark.parametrize(("body", "fragment"), [
    (b'{"reward": "all of it", "valid": true}', "workplace server /verify: the answer is not a verdict: "),
    (b'"1.0"', 'workplace server /verify: the answer is not a JSON object: "1.0"'),
])
def test_an_env_verdict_of_the_wrong_shape_is_one_clear_error(body, fragment) -> None:
    with raw_http_server(body) as base:
        with pytest.raises(RuntimeError) as caught:
            within(20, lambda: HTTPEnv(base, timeout_s=5).verify("s"))
    assert fragment in str(caught.value)
