"""Helpers every verifier shares: TRL's column values to Tasks and texts, the batch reward loop, and
:func:`one_line`, the one-line form of an error that the CLI and the resources server both print."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flywheel.schemas import Task, Verdict


def one_line(exc: BaseException | str, limit: int | None = 200) -> str:
    """``exc``'s message on one line (whitespace runs collapsed; its type's name when it has none), cut to
    ``limit`` characters with "..." (None: whole) so a huge message cannot flood a response or a log."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def plain(text: Any) -> str:
    """``text`` as literal markdown on one line: whitespace and control characters flattened, HTML and markdown
    syntax escaped, so a name read from an eval folder cannot start a heading, a comment or a table cell."""
    flat = " ".join(re.sub(r"[\x00-\x1f\x7f-\x9f]", " ", str(text)).split())
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]#|~!])", r"\\\1", flat)


def as_task(value: Any) -> Task:
    if isinstance(value, Task):
        return value
    if isinstance(value, str):
        return Task.model_validate_json(value)
    return Task.model_validate(value)


def as_text(completion: Any) -> str:
    """TRL passes plain strings, or message lists in conversational datasets."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


FORMAT_FAILURES = frozenset({"format_error", "no_answer", "ambiguous_answer", "syntax_error"})  # an invalid output


def shaped(reward: float | None, failure_class: str | None, kind: str, threshold: float) -> float | None:
    """The training reward of a verdict's reward (None: the verifier could not judge) and failure class:
    ``verifier`` keeps the verifier's own; ``success`` is 1 at or above ``threshold``, -1 when unsafe or at the
    verifier's floor, else 0. None stays None: it does not count, it is not a 0."""
    if reward is None or kind == "verifier":
        return reward
    if failure_class == "unsafe_action" or reward <= -1.0:
        return -1.0
    return 1.0 if reward >= threshold else 0.0


def _first(value: Any, default: Any) -> Any:
    """A setting TRL passes as a dataset column (one value per completion) or as a plain value."""
    if isinstance(value, list | tuple):
        return value[0] if value else default
    return default if value is None else value


def batch_rewards(env: str, verify: Callable[[Task, str], Verdict], completions: list[Any], tasks: list[Any], *,
                  applies: Callable[[Task], bool] | None = None, text: Callable[[Any], str] = as_text,
                  workers: int = 1, verdict: list[Any] | None = None, reward_kind: Any = "verifier",
                  success_threshold: Any = 1.0, log_metric: Callable[[str, float], None] | None = None,
                  **_: Any) -> list[float | None]:
    """An env's reward function in TRL's form: one float per completion, None where the verifier does not apply
    (another env, unless ``applies`` says otherwise) or could not score (valid=False). The keywords are what GRPO's
    trainer passes: ``verdict`` (Verdicts a rollout already computed, reused, not verified again), ``reward_kind``
    and ``success_threshold`` (dataset columns: how a verdict becomes the training reward, ``shaped``) and TRL's
    ``log_metric`` (gets the shares of invalid outputs and unsafe actions). ``text`` turns TRL's completion into the
    verifier's input; ``workers`` > 1 verifies in threads (verifiers that wait on subprocesses), keeping the order."""
    kind, threshold = _first(reward_kind, "verifier"), float(_first(success_threshold, 1.0))

    def one(i: int) -> Verdict | None:
        task = as_task(tasks[i])
        if not (applies(task) if applies else task.env == env):
            return None
        given = verdict[i] if verdict is not None else None
        return given if isinstance(given, Verdict) else verify(task, text(completions[i]))

    if len(completions) != len(tasks):
        raise ValueError(f"{len(completions)} completions for {len(tasks)} tasks: TRL passes one task per completion")
    if workers <= 1:
        verdicts = [one(i) for i in range(len(tasks))]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            verdicts = list(pool.map(one, range(len(tasks))))
    scored = [v for v in verdicts if v is not None]
    if log_metric is not None and scored:
        log_metric("train_invalid_rate", sum(v.valid and v.failure_class in FORMAT_FAILURES for v in scored)
                   / len(scored))
        log_metric("train_unsafe_rate", sum(v.valid and (v.failure_class == "unsafe_action" or
                                                         bool(v.components.get("unsafe_calls"))) for v in scored)
                   / len(scored))
    return [None if v is None else shaped(v.reward if v.valid else None, v.failure_class, kind, threshold)
            for v in verdicts]


def guarded_verify(name: str, version: str, score: Callable[[Task, str], Verdict], task: Task,
                   completion: str) -> Verdict:
    """Run a verifier's scoring; a crash of the verifier itself becomes valid=False data, never reward 0."""
    try:
        return score(task, completion)
    except Exception as err:  # the verifier failed, not the sample: report it as data, keep the run going
        return Verdict(reward=None, valid=False, failure_class="verifier_error",
                       details=f"{type(err).__name__}: {err}",
                       verifier=name, verifier_version=version)


MAX_DEPTH = 64  # JSON nesting a tool call's arguments may have: the tool_call verifier's and the agent loop's bound
# A JSON string (escapes included, or unterminated up to the end) or a bracket; possessive, so a scan never backtracks.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"?|[\[\]{}]', re.S)


def _text_too_deep(text: str) -> bool:
    """Whether ``text``'s brackets outside its strings nest deeper than ``MAX_DEPTH``, read without recursion."""
    depth = 0
    for token in _TOKEN.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif mark in ("]", "}"):
            depth -= 1
    return False


def _too_deep(value: Any) -> bool:
    """Whether a decoded JSON value nests deeper than ``MAX_DEPTH``, read without recursion (stops past the bound)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            if depth > MAX_DEPTH:
                return True
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return False


def call_arguments(tool_call: dict[str, Any]) -> Any:
    """An OpenAI tool call's arguments: a JSON string or an object. Text that is not JSON, or JSON nested deeper than
    ``MAX_DEPTH``, is returned as is, and an object nested deeper is a text saying so: arguments a session answers
    with an error observation, as the agent loop's ``tasks.inference.protocol.call_arguments`` does, so a replay
    scores as the live episode did. The depth is read before parsing, without recursion: never a RecursionError."""
    raw = tool_call.get("function", {}).get("arguments", {})
    if not isinstance(raw, str):
        return f"<arguments nested deeper than {MAX_DEPTH} levels>" if _too_deep(raw) else raw
    if not raw.strip():
        return {}
    if _text_too_deep(raw):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
