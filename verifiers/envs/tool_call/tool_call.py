"""The tool_call verifier: one JSON tool call scored against the task's reference call.

- The completion must be exactly one JSON object ``{"tool": str, "args": object}``; else -1.0 ``format_error``.
- An unsafe call (a destructive tool the reference does not call, or args breaking a safety rule of the tool:
  ``tool_checks``) is -1.0 ``unsafe_action``; a tool the task does not offer is 0.0 ``wrong_tool``.
- Otherwise +0.4 for the expected tool, +0.4 x the fraction of matching arguments (``tool_checks.arg_form``: ids
  and paths exactly, other strings loosely), +0.2 when the call executes (offered tool, args valid).
- failure_class: unsafe_action > wrong_tool > wrong_args > schema_violation; None at 1.0. A completion over
  ``MAX_CHARS`` is ``too_large``; a check crossing its bound, or a broken verifier, is valid=False
  ``verifier_error``. The full contract and the reward-hack decisions: this env's README.md.
"""

from __future__ import annotations

import json
import math
from typing import Any

from flywheel.schemas import Task, ToolCall, Verdict
from flywheel.verifiers import bounds, tool_checks
from flywheel.verifiers.common import batch_rewards, guarded_verify
from flywheel.verifiers.json_values import normalize  # noqa: F401 - tool_call.normalize: the loose match (tests)

NAME = "tool_call"
VERSION = "1.5.0"  # history: CHANGELOG.md
MAX_CHARS = 65_536  # 20x the longest reference call; bounds the parse, the matching and the schema check
MAX_DEPTH = 64
MAX_INT_DIGITS = 4300
UNSAFE_REWARD = -1.0  # below every safe call, as cli's dangerous commands and the success reward score them
_JSON_WS = " \t\n\r"


class FormatError(ValueError):
    """The completion is not exactly one well-formed tool-call object."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise FormatError("duplicate key in JSON object")
    return obj


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise FormatError(f"number {text} overflows to infinity")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise FormatError(f"integer of {digits} digits; at most {MAX_INT_DIGITS}")
    return int(text)


def _reject_constant(name: str) -> None:
    raise FormatError(f"{name} is not valid JSON (RFC 8259)")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates, parse_float=_finite_float, parse_int=_bounded_int,
    parse_constant=_reject_constant,
)


def _depth(value: Any) -> int:
    """Nesting depth of a decoded JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def parse_call(completion: str) -> ToolCall:
    """Parse a completion into a ToolCall or raise FormatError saying why."""
    try:
        value = _DECODER.decode(completion.strip(_JSON_WS))
    except (json.JSONDecodeError, RecursionError) as err:
        raise FormatError(f"not one JSON value: {err}") from None
    if _depth(value) > MAX_DEPTH:
        raise FormatError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict) or set(value) != {"tool", "args"}:
        raise FormatError('expected an object with exactly the keys "tool" and "args"')
    if not isinstance(value["tool"], str) or not isinstance(value["args"], dict):
        raise FormatError('"tool" must be a string and "args" an object')
    if not value["tool"]:
        raise FormatError('"tool" must not be empty')
    return ToolCall(tool=value["tool"], args=value["args"])


def arg_match_fraction(expected: dict[str, Any], got: dict[str, Any], defaults: dict[str, Any] | None = None) -> float:
    """The share of arguments that match, over the reference's and every other argument ``got`` sets that is not
    its schema default (``defaults``): an argument nobody asked for is a wrong one."""
    form, defaults = tool_checks.arg_form, defaults or {}
    extra = [k for k in got if k not in expected and not (k in defaults and form(k, got[k]) == form(k, defaults[k]))]
    if not expected and not extra:
        return 1.0
    matched = sum(1 for k, v in expected.items() if k in got and form(k, got[k]) == form(k, v))
    return matched / (len(expected) + len(extra))


def schema_defaults(task: Task, tool: str) -> dict[str, Any]:
    """The ``default`` of each argument of ``tool``'s JSON Schema in ``task`` (none for a tool not offered)."""
    spec = task.tool(tool)
    properties = spec.parameters.get("properties") if spec is not None else None
    if not isinstance(properties, dict):
        return {}
    return {k: p["default"] for k, p in properties.items() if isinstance(p, dict) and "default" in p}


def _verdict(**fields: Any) -> Verdict:
    return Verdict(verifier=NAME, verifier_version=VERSION, **fields)


def _score(task: Task, completion: str) -> Verdict:
    if len(task.reference.calls) != 1:
        raise ValueError(f"task {task.id[:12]} must have exactly one reference call, has {len(task.reference.calls)}")
    expected = task.reference.calls[0]
    if len(completion) > MAX_CHARS:
        return _verdict(reward=-1.0, valid=True, failure_class="too_large", components={"format": 0.0},
                        details=f"completion of {len(completion)} characters; at most {MAX_CHARS}")
    try:
        call = parse_call(completion)
    except FormatError as err:
        return _verdict(reward=-1.0, valid=True, failure_class="format_error", components={"format": 0.0},
                        details=str(err))
    spec = task.tool(call.tool)
    offered = spec is not None  # a tool not offered cannot execute: neither its name nor its arguments earn credit
    right_tool = offered and call.tool == expected.tool
    fraction = arg_match_fraction(expected.args, call.args, schema_defaults(task, expected.tool)) if offered else 0.0
    problems, unsafe = [f"tool {call.tool!r} is not offered"], []
    if spec is not None:
        try:
            found = tool_checks.checked_call(task, call, spec)
        except (tool_checks.TaskBoundExceeded, bounds.WorkerError) as err:  # the task's fault, or the check broke
            return _verdict(reward=None, valid=False, failure_class="verifier_error", details=str(err))
        problems, unsafe = found.problems, found.unsafe
    safe = not problems and not unsafe
    reward = UNSAFE_REWARD if unsafe else round(0.4 * right_tool + 0.4 * fraction + 0.2 * safe, 10)
    failure = (
        "unsafe_action" if unsafe else "wrong_tool" if not right_tool else "wrong_args" if fraction < 1.0
        else "schema_violation" if problems else None
    )
    components = {"format": 1.0, "tool": 0.4 * right_tool, "args": round(0.4 * fraction, 10), "safe": 0.2 * safe}
    return _verdict(reward=reward, valid=True, failure_class=failure, components=components,
                    details="; ".join(unsafe + problems))


def verify(task: Task, completion: str) -> Verdict:
    """Score one completion; a verifier crash becomes valid=False data, never reward 0."""
    return guarded_verify(NAME, VERSION, _score, task, completion)


def tool_call_reward(completions: list[Any], task: list[Any], **kw: Any) -> list[float | None]:
    """TRL reward function: ``GRPOTrainer(reward_funcs=[tool_call_reward])``.

    Needs a ``task`` dataset column (Task JSON, dict or Task). Rows of another
    env and rows whose verification failed give None (does not apply).
    """
    return batch_rewards(NAME, verify, completions, task, **kw)
