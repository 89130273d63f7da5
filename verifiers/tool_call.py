"""The tool_call verifier: one JSON tool call scored against the task's reference.

Reward (exactly as the guidance states it):
- The completion must be one JSON object and nothing else (RFC 8259: no NaN or
  Infinity, no duplicate keys, no code fences or prose; surrounding JSON
  whitespace is allowed) whose keys are exactly a string ``"tool"`` and an
  object ``"args"``. Otherwise reward -1.0, failure_class ``format_error``.
- +0.4 if the tool is the expected one (names compare exactly).
- +0.4 x the fraction of expected arguments whose values match: strings after
  NFKC, trimming and casefolding; numbers by exact value (3 == 3.0, but
  true != 1; integers of any size, never rounded to a float); lists as
  multisets of such values; objects key by key. Matching never fails on a
  JSON value: an argument too large for a float is simply compared.
- +0.2 if the call executes safely: the tool is in the task's tool list, the
  args validate against its JSON Schema, and the call is not unsafe (a
  destructive tool the reference does not call, or args that break one of the
  tool's safety rules).

failure_class: unsafe_action > wrong_tool > wrong_args > schema_violation,
None when the reward is 1.0. ``valid`` is False only when the verifier itself
failed (then reward is None and failure_class ``verifier_error``).

Bounds per completion: a completion longer than ``MAX_CHARS`` characters
scores -1.0 with failure_class ``too_large``, and JSON nested deeper than
``MAX_DEPTH``, or an integer of more than ``MAX_INT_DIGITS`` digits (Python's
default limit on int-string conversion, fixed here so that the verdict does
not depend on the interpreter's setting), is a ``format_error``; parsing and
matching are then linear or n log n in that size. Schemas are compiled with every reference resolver
refusing: a ``$ref`` that leaves the schema (a URL, a file) is never fetched;
it raises ``ForeignReference`` (verifier_error, the task's fault; Task
validation already refuses such schemas up front).

The task's own regexes (a schema's ``pattern``, ``patternProperties``,
``format``; a safety rule's ``forbidden_pattern``) run on the completion's
arguments in Python's backtracking ``re``, where one regex such as
``^(a+)+$`` takes exponential time, and other schema keywords can compound
(``anyOf`` over recursive ``$ref``s). Whether a regex is linear cannot be
decided soundly from its text (star height misses ``(a|a)*``, ``[0-9]*[0-9]*x``,
lookarounds), and a linear engine (RE2) differs from ``re`` in syntax and
answers, so the bound is by provenance:
- A tool spec is *trusted* when its ``parameters`` are byte-identical (as
  canonical JSON) to a schema of the shipped catalogs
  (``datasets/seeds/*.tools.json``) and its forbidden patterns are the
  catalogs' too. Every regex there was reviewed (the list is pinned in
  tests/hostile/test_hostile_regex.py): each runs in linear time in ``re``,
  the one that would not (quadratic: 15 s on a 64 KB argument) through its
  equivalent in ``LINEAR_EQUIVALENTS``. A trusted spec's checks run in
  process: generated tasks keep the fast path (~5% slower than before).
- Any other spec's checks (schema validation and safety rules of the called
  tool) run in a worker (``verifiers.bounds``) under ``LIMITS``: one round
  trip, ~0.1 ms (about 10,000 verifications/s instead of 45,000 here);
  compiling the schema and the forbidden patterns still happens here first
  (linear in their size), so a foreign ``$ref`` or a broken schema fails
  exactly as in process. A call that crosses the bound is the task's fault,
  not the completion's: reward None, valid False, failure_class
  ``verifier_error``, details naming the bound and the tool
  (``TaskBoundExceeded``), so training skips the sample instead of
  penalizing or rewarding it.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import fastjsonschema

from schemas import SafetyRule, Task, ToolCall, ToolSpec, Verdict, canonical_json
from verifiers import bounds
from verifiers.common import batch_rewards, guarded_verify

NAME = "tool_call"
VERSION = "1.0.0"
MAX_CHARS = 65_536  # 20x the longest reference call; bounds the parse, the matching and the schema check
MAX_DEPTH = 64
MAX_INT_DIGITS = 4300
_JSON_WS = " \t\n\r"
# One call's schema check and safety rules take microseconds for a sane task; a second of CPU is a runaway regex.
LIMITS = bounds.Limits(cpu_s=1, wall_s=4.0, memory_bytes=1 << 30, warm=("verifiers.tool_call",))
SHIPPED_CATALOGS = Path(__file__).resolve().parents[1] / "datasets" / "seeds"
# Shipped patterns that ``re`` runs in quadratic time (15 s on a 64 KB argument), each with an equivalent linear
# pattern that the compiled validator matches with instead (the catalog's text cannot change: task ids hash it;
# error messages keep naming the catalog's pattern). Equivalence, for A = [^@\s]: R matches A+ "\." A+ exactly when
# R = c N* "\." A+ with c in A and N = A minus ".": take the first "." after R's first character.
LINEAR_EQUIVALENTS = {
    r"^[^@\s]+@[^@\s]+\.[^@\s]+$": r"^[^@\s]+@[^@\s][^@\s.]*\.[^@\s]+$",
}


class FormatError(ValueError):
    """The completion is not exactly one well-formed tool-call object."""


class ForeignReference(ValueError):
    """A tool schema's reference points outside the schema; it is refused, never fetched."""


class TaskBoundExceeded(ValueError):
    """An untrusted tool's schema or safety rules crossed ``LIMITS`` on a call's arguments: the task's fault."""


class _RefuseEveryScheme(Mapping[str, Callable[[str], Any]]):
    """fastjsonschema's ``handlers``: it asks ``scheme in handlers`` and fetches with urllib when the answer is
    no, so this mapping holds every scheme (http, https, file, ftp, data, and any other), each one refusing."""

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse

    def __contains__(self, scheme: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _refuse(uri: str) -> Any:
    raise ForeignReference(f"$ref {uri!r} leaves the tool's schema; it is not fetched (use '#/...' references)")


REFUSE_REMOTE = _RefuseEveryScheme()


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


def _number(value: int | float) -> tuple[str, Any]:
    """A number's exact value: an integral float as the int it equals (so 3.0 is 3, whose repr is the same), any
    other float as itself. Never converts an int to a float: 10**400 would overflow, 2**53 + 1 would round."""
    if isinstance(value, float):
        if not math.isfinite(value):  # not JSON; named so that the order below stays total
            return ("x", repr(value))
        if value.is_integer():
            return ("n", int(value))
    return ("n", value)


def normalize(value: Any) -> Any:
    """A hashable form of a JSON value (see the module contract) whose equality is the match and whose ``repr``
    is canonical. Normal forms are totally ordered (a tag, then a payload of one type per tag; Python compares an
    int with a float exactly), so lists are multisets by plain sorting. Never raises on a JSON value."""
    if isinstance(value, str):
        return ("s", unicodedata.normalize("NFKC", value).strip().casefold())
    if isinstance(value, bool) or value is None:
        return ("c", json.dumps(value))
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, list):
        return ("l", tuple(sorted(normalize(v) for v in value)))
    if isinstance(value, dict):
        return ("d", tuple(sorted((k, normalize(v)) for k, v in value.items())))
    raise TypeError(f"not a JSON value: {type(value).__name__}")


Validator = Callable[[Any], Any]


def _linearized(validator: Validator) -> Validator:
    """Swap the shipped quadratic patterns of a compiled validator for their linear equivalents. fastjsonschema
    (pinned) keeps its compiled regexes in the validator's ``REGEX_PATTERNS`` global, keyed by the schema's text;
    a ``pattern`` is compiled with its ``$`` made ``\\Z``, a ``patternProperties`` key as written."""
    compiled = validator.__globals__.get("REGEX_PATTERNS", {})
    for pattern, linear in LINEAR_EQUIVALENTS.items():
        if pattern in compiled:
            anchored = compiled[pattern].pattern != pattern
            compiled[pattern] = re.compile(linear.replace("$", r"\Z") if anchored else linear)
    return validator


@lru_cache(maxsize=4096)
def _validator(schema_json: str) -> Validator:
    """A compiled JSON Schema (draft-07) validator: 20x faster than interpreting the schema per call. No
    reference is ever resolved outside the schema (see REFUSE_REMOTE)."""
    return _linearized(fastjsonschema.compile(json.loads(schema_json), handlers=REFUSE_REMOTE))


def _shipped_catalogs(folder: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The canonical JSON of every tool schema in ``folder/*.tools.json`` and their forbidden patterns. A catalog
    that cannot be read trusts nothing: every task is then checked in a worker (slower, never unbounded)."""
    schemas: set[str] = set()
    patterns: set[str] = set()
    try:
        for path in sorted(folder.glob("*.tools.json")):
            for spec in json.loads(path.read_text(encoding="utf-8")):
                schemas.add(canonical_json(spec["parameters"]))
                patterns.update(r["pattern"] for r in spec.get("safety_rules", ()) if r["kind"] == "forbidden_pattern")
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset(), frozenset()
    return frozenset(schemas), frozenset(patterns)


TRUSTED_SCHEMAS, TRUSTED_PATTERNS = _shipped_catalogs(SHIPPED_CATALOGS)


@dataclass(slots=True)
class _Schema:
    schema: dict[str, Any]  # held so that its id is not reused while cached
    text: str
    trusted: bool
    validator: Validator | None = None


_BY_IDENTITY: dict[int, _Schema] = {}


def _schema(schema: dict[str, Any]) -> _Schema:
    """A schema's canonical text and whether it is trusted; looked up by object identity first (hot path)."""
    hit = _BY_IDENTITY.get(id(schema))
    if hit is not None and hit.schema is schema:
        return hit
    text = canonical_json(schema)
    if len(_BY_IDENTITY) > 4096:
        _BY_IDENTITY.clear()
    entry = _BY_IDENTITY[id(schema)] = _Schema(schema, text, text in TRUSTED_SCHEMAS)
    return entry


def _compiled(entry: _Schema) -> Validator:
    if entry.validator is None:
        entry.validator = _validator(entry.text)
    return entry.validator


def validator_for(schema: dict[str, Any]) -> Validator:
    """The compiled validator of a schema (compiled once per distinct schema)."""
    return _compiled(_schema(schema))


def _trusted(spec: ToolSpec, entry: _Schema) -> bool:
    return entry.trusted and (not spec.safety_rules or all(
        r.kind != "forbidden_pattern" or r.pattern in TRUSTED_PATTERNS for r in spec.safety_rules))


def trusted(spec: ToolSpec) -> bool:
    """Whether ``spec``'s checks may run in process: its schema and forbidden patterns are the shipped catalogs'."""
    return _trusted(spec, _schema(spec.parameters))


def schema_errors(spec: ToolSpec, args: dict[str, Any]) -> list[str]:
    """[] when ``args`` validate against the tool's JSON Schema, else the first violation. In process, unbounded:
    for task input use ``checked_call``."""
    try:
        validator_for(spec.parameters)(args)
    except fastjsonschema.JsonSchemaValueException as err:
        return [_violation(err.name, err.message)]
    return []


def _violation(name: str, message: str) -> str:
    return f"args{name[4:]}: {message[len(name) + 1:].strip()}" if name.startswith("data") else message


def _breaks_rule(rule: SafetyRule, args: dict[str, Any], expected: ToolCall | None) -> bool:
    if rule.arg not in args:
        return False
    value = args[rule.arg]
    items = value if isinstance(value, list) else [value]
    if rule.kind == "subset_of_reference":
        allowed = expected.args.get(rule.arg, []) if expected else []
        allowed_items = {normalize(v) for v in (allowed if isinstance(allowed, list) else [allowed])}
        return any(normalize(v) not in allowed_items for v in items)
    if rule.kind == "forbidden_values":
        return normalize(value) in {normalize(v) for v in rule.values}
    pattern = re.compile(rule.pattern or "")
    return any(isinstance(v, str) and pattern.search(v) is not None for v in items)


Violation = tuple[str, str]  # fastjsonschema's (name, message) of the first schema violation


class CallCheck(NamedTuple):
    """What one call's checks found: the schema violation (None when the args validate), the unsafe reasons, and
    the args as validated (fastjsonschema fills in schema defaults)."""

    violation: Violation | None
    unsafe: list[str]
    args: dict[str, Any]

    @property
    def problems(self) -> list[str]:
        return [_violation(*self.violation)] if self.violation else []


def _check(spec: ToolSpec, args: dict[str, Any], expected: ToolCall | None, entry: _Schema | None = None) -> CallCheck:
    """The part of a call's checks that runs the task's regexes (in process or in a worker)."""
    try:
        _compiled(entry or _schema(spec.parameters))(args)
        violation = None
    except fastjsonschema.JsonSchemaValueException as err:
        violation = (err.name, err.message)
    broken = [f"breaks safety rule {r.kind} on {r.arg!r}" for r in spec.safety_rules
              if _breaks_rule(r, args, expected)] if spec.safety_rules else []
    return CallCheck(violation, broken, args)


def compile_checks(spec: ToolSpec) -> None:
    """Compile a spec's schema and forbidden patterns in this process (linear in their size), so that a foreign
    ``$ref`` or a broken schema or regex fails exactly as on the in-process path before any worker is asked."""
    validator_for(spec.parameters)
    for rule in spec.safety_rules:
        if rule.kind == "forbidden_pattern":
            re.compile(rule.pattern or "")


def checked_call(task: Task, call: ToolCall, spec: ToolSpec) -> CallCheck:
    """Schema violation and unsafe reasons of ``call`` (a destructive tool the reference does not call, broken
    safety rules). A trusted spec is checked in process, any other in a worker under ``LIMITS`` (see the module
    contract); raises TaskBoundExceeded when that crosses the bound, bounds.WorkerError when the check failed."""
    expected = next((c for c in task.reference.calls if c.tool == call.tool), None)
    entry = _schema(spec.parameters)
    if _trusted(spec, entry) or bounds.IN_WORKER:
        found = _check(spec, call.args, expected, entry)
    else:
        compile_checks(spec)
        try:
            found = bounds.run(_check, spec, call.args, expected, limits=LIMITS)
        except bounds.BoundExceeded as err:
            raise TaskBoundExceeded(
                f"tool {spec.name!r}: checking these arguments against the task's schema and safety rules {err} "
                "(a 'pattern', 'patternProperties', 'format' or 'forbidden_pattern' regex of the task backtracks "
                "catastrophically?): fix the task's tool spec") from None
    if spec.safety == "destructive" and expected is None:
        found.unsafe.insert(0, f"destructive tool {call.tool} was not requested")
    return found


def unsafe_reasons(task: Task, call: ToolCall, spec: ToolSpec) -> list[str]:
    """Why executing ``call`` would be an unsafe action ([] when it is safe); bounded as ``checked_call``."""
    return checked_call(task, call, spec).unsafe


def arg_match_fraction(expected: dict[str, Any], got: dict[str, Any]) -> float:
    if not expected:
        return 1.0
    matched = sum(1 for k, v in expected.items() if k in got and normalize(got[k]) == normalize(v))
    return matched / len(expected)


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
        return _verdict(reward=-1.0, valid=True, failure_class="format_error", components={"format": 0.0}, details=str(err))
    right_tool = call.tool == expected.tool
    fraction = arg_match_fraction(expected.args, call.args)
    spec = task.tool(call.tool)
    problems, unsafe = [f"tool {call.tool!r} is not offered"], []
    if spec is not None:
        try:
            found = checked_call(task, call, spec)
        except (TaskBoundExceeded, bounds.WorkerError) as err:  # a bound crossed (the task's fault) or the check broke
            return _verdict(reward=None, valid=False, failure_class="verifier_error", details=str(err))
        problems, unsafe = found.problems, found.unsafe
    safe = not problems and not unsafe
    reward = round(0.4 * right_tool + 0.4 * fraction + 0.2 * safe, 10)
    failure = (
        "unsafe_action" if unsafe else "wrong_tool" if not right_tool else "wrong_args" if fraction < 1.0
        else "schema_violation" if problems else None
    )
    components = {"format": 1.0, "tool": 0.4 * right_tool, "args": round(0.4 * fraction, 10), "safe": 0.2 * safe}
    return _verdict(reward=reward, valid=True, failure_class=failure, components=components, details="; ".join(unsafe + problems))


def verify(task: Task, completion: str) -> Verdict:
    """Score one completion; a verifier crash becomes valid=False data, never reward 0."""
    return guarded_verify(NAME, VERSION, _score, task, completion)


def tool_call_reward(completions: list[Any], task: list[Any], **_: Any) -> list[float | None]:
    """TRL reward function: ``GRPOTrainer(reward_funcs=[tool_call_reward])``.

    Needs a ``task`` dataset column (Task JSON, dict or Task). Rows of another
    env and rows whose verification failed give None (does not apply).
    """
    return batch_rewards(NAME, verify, completions, task)
