"""The agent loop: a policy drives a workplace session through tool calls until it answers in plain text, spends
its token budget or reaches max_steps; the episode's trajectory is OpenAI chat messages, replayable by
``verifiers.workplace.verify``.

Contract:
- A policy is ``policy(messages, tools) -> PolicyReply``: native OpenAI ``tool_calls``, or text that is one
  JSON object ``{"tool": ..., "args": {...}}`` (or a list of them), the project's text format for models
  without native tool calling. Any other text is the final answer. A reply never raises: JSON nested deeper than
  ``protocol.MAX_DEPTH`` is text, and a malformed native call is made well formed (``native_call``) and gets an
  error observation.
- The environment is in process (``LocalEnv``) or the resources server over HTTP (``HTTPEnv``); both give
  one fresh session per episode and score it with the same verifier.
- ``run_episode`` runs one episode; ``run_episodes`` runs several in lockstep, each in its own session, asking a
  batch policy (``BackendPolicies``) for all their next replies at once: the same steps, batched generation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from flywheel.schemas import Task, Verdict
from flywheel.tasks.inference.policy import (
    Backend,
    Generation,
    Request,
    Sampling,
    batch_seed,
    call_arguments,
    parse_action,
)
from flywheel.tasks.inference.protocol import native_call
from flywheel.verifiers.common import one_line
from flywheel.verifiers.envs.workplace.workplace import Session, score_session
from flywheel.verifiers.fetch import bounded_post


@dataclass(frozen=True)
class PolicyReply:
    text: str | None
    tool_calls: list[dict[str, Any]] | None = None
    completion_tokens: int = 0


class Policy(Protocol):
    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply: ...


Turn = tuple[int, list[dict[str, Any]], list[dict[str, Any]]]  # episode index, its messages so far, its tools


class BatchPolicy(Protocol):
    def __call__(self, turns: list[Turn]) -> list[PolicyReply]: ...


class Env(Protocol):
    def seed(self, task: Task) -> str: ...
    def call(self, session_id: str, tool: str, args: Any) -> dict[str, Any]: ...
    def verify(self, session_id: str) -> Verdict: ...


@dataclass
class Episode:
    session_id: str
    messages: list[dict[str, Any]]
    verdict: Verdict
    steps: int
    completion_tokens: int
    stop_reason: str  # answer | max_steps | max_tokens


def openai_tools(task: Task) -> list[dict[str, Any]]:
    return [{"type": "function",
             "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in task.tools]


class LocalEnv:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}

    def seed(self, task: Task) -> str:
        session_id = f"local-{len(self.sessions)}"
        self.sessions[session_id] = Session.seeded(task)
        return session_id

    def call(self, session_id: str, tool: str, args: Any) -> dict[str, Any]:
        return self.sessions[session_id].call(tool, args)

    def verify(self, session_id: str) -> Verdict:
        session = self.sessions.pop(session_id)
        return score_session(session.task, session)


class HTTPEnv:
    """The resources server (``flywheel serve-env``) as an Env."""

    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s)
        self.timeout_s = timeout_s
        self.tools: dict[str, list[str]] = {}

    def _post(self, path: str, body: dict[str, Any], *keys: str) -> dict[str, Any]:
        """The server's JSON object, holding ``keys``; one RuntimeError naming the path for anything else. The
        whole reply has one deadline and a size cap (``bounded_post``): a server trickling bytes cannot stall the
        episodes."""
        try:
            status, data = bounded_post(self.client, path, body, self.timeout_s)
        except (httpx.TransportError, ValueError) as err:
            raise RuntimeError(f"workplace server {path}: {type(err).__name__}: {err}") from None
        text = data[:300].decode("utf-8", "replace")
        if status >= 400:
            raise RuntimeError(f"workplace server {path}: HTTP {status}: {text}")
        try:
            reply = json.loads(data)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not all(k in reply for k in keys):
            holding = f" with {', '.join(keys)}" if keys else ""
            raise RuntimeError(f"workplace server {path}: the answer is not a JSON object{holding}: {text[:100]}")
        return reply

    def seed(self, task: Task) -> str:
        reply = self._post("/seed_session", {"task": task.model_dump(mode="json")}, "session_id", "tools")
        self.tools[reply["session_id"]] = reply["tools"]
        return reply["session_id"]

    def call(self, session_id: str, tool: str, args: Any) -> dict[str, Any]:
        offered = self.tools[session_id]
        if tool not in offered:  # answered here as the in-process session does: a name is never a server path
            return {"error": f"tool {tool!r} is not available; available: {offered}"}
        if not isinstance(args, dict):
            return {"error": "arguments must be a JSON object"}
        return self._post(f"/{tool}", {"session_id": session_id, "args": args}, "observation")["observation"]

    def verify(self, session_id: str) -> Verdict:
        self.tools.pop(session_id, None)
        reply = self._post("/verify", {"session_id": session_id, "close": True})
        try:
            return Verdict.model_validate(reply)
        except ValueError as err:  # pydantic's ValidationError
            raise RuntimeError(f"workplace server /verify: the answer is not a verdict: {one_line(err)}") from None


@dataclass
class _Open:
    """An episode under way: its session, messages so far, tokens spent, steps taken and why it stopped (None:
    not yet)."""

    session_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tokens: int = 0
    steps: int = 0
    stop: str | None = None


def _open(env: Env, task: Task) -> _Open:
    return _Open(env.seed(task), [m.model_dump(exclude_none=True) for m in task.messages], openai_tools(task))


def _calls(reply: PolicyReply) -> list[dict[str, Any]] | None:
    """The reply's tool calls in OpenAI's shape: native calls made well formed (``native_call``: a malformed one
    gets an error observation), else those its text writes (``parse_action``); None for a final answer. A model's
    reply never raises here: deep or malformed JSON is plain text."""
    native = reply.tool_calls
    if native:
        items = native if isinstance(native, list | tuple) else [native]
        return [native_call(c, i) for i, c in enumerate(items)]
    return parse_action(reply.text if isinstance(reply.text, str) else None)


def _act(env: Env, ep: _Open, reply: PolicyReply, max_steps: int, max_tokens: int) -> None:
    """One step of an episode: the reply's calls go to its session and their observations are appended; a reply
    without calls is the final answer."""
    ep.steps += 1
    ep.tokens += reply.completion_tokens
    calls = _calls(reply)
    if not calls:
        ep.messages.append({"role": "assistant", "content": reply.text if isinstance(reply.text, str) else ""})
        ep.stop = "answer"
        return
    ep.messages.append({"role": "assistant", "content": None, "tool_calls": calls})
    for call in calls:
        name = call["function"]["name"]
        observation = env.call(ep.session_id, name, call_arguments(call))
        ep.messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "name": name,
                            "content": json.dumps(observation)})
    if ep.tokens >= max_tokens:
        ep.stop = "max_tokens"
    elif ep.steps >= max_steps:
        ep.stop = "max_steps"


def _close(env: Env, ep: _Open) -> Episode:
    return Episode(ep.session_id, ep.messages, env.verify(ep.session_id), ep.steps, ep.tokens, ep.stop or "max_steps")


def run_episode(policy: Policy, env: Env, task: Task, max_steps: int = 8, max_tokens: int = 2048) -> Episode:
    ep = _open(env, task)
    while ep.stop is None and ep.steps < max_steps:
        _act(env, ep, policy(ep.messages, ep.tools), max_steps, max_tokens)
    return _close(env, ep)


def run_episodes(policy: BatchPolicy, env: Env, tasks: Sequence[Task], max_steps: int = 8,
                 max_tokens: int = 2048) -> list[Episode]:
    """The episodes of ``tasks`` in lockstep, each in its own session: at every step the episodes still under way
    ask the policy for their next replies in one batch (decoding a batch costs little more than one sequence on the
    in-process backends). Each episode's steps are exactly ``run_episode``'s."""
    eps = [_open(env, task) for task in tasks]
    for _ in range(max_steps):
        active = [i for i, ep in enumerate(eps) if ep.stop is None]
        if not active:
            break
        replies = policy([(i, eps[i].messages, eps[i].tools) for i in active])
        for i, reply in zip(active, replies, strict=True):
            _act(env, eps[i], reply, max_steps, max_tokens)
    return [_close(env, ep) for ep in eps]


@dataclass
class BackendPolicy:
    """A policy backend (tasks.policy) as the agent's policy: step i of an episode is sampled with seed
    H(seed, i), so an episode is reproducible. ``generations`` keeps every step's record (latency, tokens)."""

    backend: Backend
    sampling: Sampling
    seed: int = 0
    label: str = ""  # what errors name: the task
    generations: list[Generation] = field(default_factory=list)

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply:
        step_seed = batch_seed([self.seed, len(self.generations)])
        request = Request(messages, tools, step_seed, agent=True, label=self.label)
        gen = self.backend.generate([request], self.sampling)[0]
        self.generations.append(gen)
        return PolicyReply(gen.text, gen.tool_calls, gen.completion_tokens)


@dataclass
class BackendPolicies:
    """A policy backend driving several episodes in lockstep (``run_episodes``): step i of episode e is sampled with
    seed H(seeds[e], i), as ``BackendPolicy`` samples it, and the step's requests go to the backend in one call.
    ``generations[e]`` keeps episode e's records (latency: the batch's wait)."""

    backend: Backend
    sampling: Sampling
    seeds: list[int]
    labels: list[str]
    generations: list[list[Generation]] = field(init=False)

    def __post_init__(self) -> None:
        self.generations = [[] for _ in self.seeds]

    def __call__(self, turns: list[Turn]) -> list[PolicyReply]:
        requests = [Request(messages, tools, batch_seed([self.seeds[e], len(self.generations[e])]), agent=True,
                            label=self.labels[e]) for e, messages, tools in turns]
        gens = self.backend.generate(requests, self.sampling)
        for (e, _, _), gen in zip(turns, gens, strict=True):
            self.generations[e].append(gen)
        return [PolicyReply(g.text, g.tool_calls, g.completion_tokens) for g in gens]
