"""The OpenAI backend: any OpenAI-compatible /v1/chat/completions server, and where its API key may be sent."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, Field, field_validator

from flywheel.tasks.inference.protocol import Generation, Request, Sampling, as_text_chat


class _CallFunction(BaseModel):
    name: str = ""
    arguments: str | dict[str, Any] = "{}"


class _Call(BaseModel):
    id: str | None = None
    type: str = "function"
    function: _CallFunction


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_Call] | None = None


class _Choice(BaseModel):
    message: _Message = Field(default_factory=_Message)
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)


class Completion(BaseModel):
    """What the OpenAI backend reads of a server's answer; anything else in it is ignored."""
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage = Field(default_factory=_Usage)

    @field_validator("usage", mode="before")
    @classmethod
    def _no_usage(cls, value: Any) -> Any:
        return {} if value is None else value


def _first_error(err: ValueError) -> str:
    errors = getattr(err, "errors", lambda: [])()
    if not errors:
        return str(err).splitlines()[0]
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "the body"
    return f"{where}: {first.get('msg', 'invalid')}"


OPENAI_BASE_URL = "https://api.openai.com/v1"  # the official API: the key may always go there
KEY_BASE_URLS = "FLYWHEEL_OPENAI_BASE_URLS"  # the worker operator's list of other base URLs the key may go to


def _origin(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port, path) of a base URL, case and default port and trailing slash aside."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:  # a port that is not a number: matches nothing
        port = -1
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_key_destination(base_url: str, api_key: str | None) -> None:
    """The API key (the worker's $OPENAI_API_KEY) goes only where the worker's operator said it may: the official
    API (``OPENAI_BASE_URL``), a server on this machine (loopback: ``flywheel serve``, a local vLLM), or a base URL
    listed, comma-separated, in $FLYWHEEL_OPENAI_BASE_URLS. A base URL is a run's parameter (the Prefect UI's Run,
    a schedule) that anyone who can start a run may type; the key is not. Without a key nothing is checked (none
    is sent). Redirects are never followed, so an allowed server cannot pass the key on. ValueError."""
    if not api_key:
        return
    target = _origin(base_url)
    listed = [u for u in os.environ.get(KEY_BASE_URLS, "").split(",") if u.strip()]
    if _loopback(target[1]) or target in {_origin(u) for u in (OPENAI_BASE_URL, *listed)}:
        return
    raise ValueError(f"--base-url {base_url}: the API key ($OPENAI_API_KEY) is sent only to {OPENAI_BASE_URL}, a "
                     f"server on this machine (127.0.0.1, localhost) or a base URL listed in ${KEY_BASE_URLS} "
                     "(comma-separated, set by the worker's operator); add it there, or unset OPENAI_API_KEY for a "
                     "server that needs no key")


class OpenAIBackend:
    """Any OpenAI-compatible /v1/chat/completions server: a concurrency cap, retries with exponential backoff
    on connection errors, timeouts, 429 and 5xx; other 4xx fail at once with the server's message.
    ``native_tools`` sends the tools as OpenAI ``tools``; otherwise they are rendered into the prompt. ``api_key``
    goes only to a base URL ``check_key_destination`` allows."""

    name = "openai"

    def __init__(self, base_url: str, model: str, concurrency: int = 4, timeout_s: float = 120.0, retries: int = 3,
                 api_key: str | None = None, native_tools: bool = False) -> None:
        import httpx

        check_key_destination(base_url, api_key)  # before any connection: a typed base URL never gets the key
        self.httpx = httpx
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s, follow_redirects=False,
                                   headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"},
                                   limits=httpx.Limits(max_connections=concurrency))
        self.model, self.model_id = model, f"{base_url.rstrip('/')}#{model}"
        self.concurrency, self.retries, self.native_tools = concurrency, retries, native_tools
        self.timeout_s = timeout_s

    def _body(self, r: Request, sampling: Sampling) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "temperature": sampling.temperature, "top_p": sampling.top_p,
                                "max_tokens": sampling.max_tokens, "seed": r.seed}
        if self.native_tools and r.tools:
            return body | {"messages": list(r.messages), "tools": list(r.tools)}
        return body | {"messages": as_text_chat(r.messages, r.tools, r.agent)}

    def _post(self, body: dict[str, Any]) -> bytes:
        from flywheel.verifiers.fetch import bounded_post

        error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                status, data = bounded_post(self.client, "/chat/completions", body, self.timeout_s)
            except self.httpx.TransportError as err:  # refused, reset, timed out (a whole reply's deadline): retried
                error = err
            except ValueError as err:  # a reply over the cap: the server is broken, asking again will not help
                raise RuntimeError(f"OpenAI-compatible server: {err}") from None
            else:
                text = data[:300].decode("utf-8", "replace")
                if status == 200:
                    return data
                if status < 500 and status != 429:
                    raise RuntimeError(f"server refused the request ({status}): {text}")
                error = RuntimeError(f"server answered {status}: {text[:200]}")
            if attempt < self.retries:
                time.sleep(0.5 * 2 ** attempt)
        raise RuntimeError(f"OpenAI-compatible server failed after {self.retries + 1} tries: {error}")

    def _one(self, r: Request, sampling: Sampling) -> Generation:
        t0 = time.perf_counter()
        data = self._post(self._body(r, sampling))
        wait = time.perf_counter() - t0
        try:
            answer = Completion.model_validate_json(data)
        except ValueError as err:  # pydantic's ValidationError: not JSON, or not a chat completion
            raise RuntimeError(f"the server's answer is not an OpenAI chat completion: {_first_error(err)}") from None
        choice = answer.choices[0]
        calls = [c.model_dump() for c in choice.message.tool_calls or []] or None
        return Generation(choice.message.content or "", calls, r.seed, wait, answer.usage.prompt_tokens,
                          answer.usage.completion_tokens, choice.finish_reason or "stop")

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, sampling), requests))
