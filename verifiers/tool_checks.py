"""The bounded checks of a tool call: its tool's JSON Schema and safety rules, in process for the shipped
catalogs' specs and in a bounded worker for any other (used by the tool_call and workplace verifiers).

Contract:
- ``checked_call(task, call, spec)`` -> ``CallCheck`` (the schema violation, the unsafe reasons, the args as
  validated); raises ``TaskBoundExceeded`` when an untrusted spec's checks cross ``LIMITS`` (the task's fault),
  ``bounds.WorkerError`` when the check itself failed, and, given ``wait_s``, ``bounds.Busy`` when no worker
  freed up in time (the call was not checked: retry it).
- Schemas are compiled with every reference resolver refusing: a ``$ref`` that leaves the schema (a URL, a
  file) is never fetched; it raises ``ForeignReference`` (verifier_error, the task's fault; Task validation
  already refuses such schemas up front).
- ``schema_errors`` and ``validator_for`` validate in process, unbounded: for trusted input (Task validation).

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
  (``verifiers/envs/*/tools.json``) and its forbidden patterns are the
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
import re
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import fastjsonschema

from flywheel.schemas import SafetyRule, Task, ToolCall, ToolSpec, canonical_json
from flywheel.verifiers import bounds
from flywheel.verifiers.json_values import normalize

# One call's schema check and safety rules take microseconds for a sane task; a second of CPU is a runaway regex.
LIMITS = bounds.Limits(cpu_s=1, wall_s=4.0, memory_bytes=1 << 30, warm=("flywheel.verifiers.tool_checks",))
SHIPPED_CATALOGS = Path(__file__).resolve().parent / "envs"  # every env folder's tools.json
# Shipped patterns that ``re`` runs in quadratic time (15 s on a 64 KB argument), each with an equivalent linear
# pattern that the compiled validator matches with instead (the catalog's text cannot change: task ids hash it;
# error messages keep naming the catalog's pattern). Equivalence, for A = [^@\s]: R matches A+ "\." A+ exactly when
# R = c N* "\." A+ with c in A and N = A minus ".": take the first "." after R's first character.
LINEAR_EQUIVALENTS = {
    r"^[^@\s]+@[^@\s]+\.[^@\s]+$": r"^[^@\s]+@[^@\s][^@\s.]*\.[^@\s]+$",
}


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
    """The canonical JSON of every tool schema in ``folder/*/tools.json`` and their forbidden patterns. A catalog
    that cannot be read trusts nothing: every task is then checked in a worker (slower, never unbounded)."""
    schemas: set[str] = set()
    patterns: set[str] = set()
    try:
        for path in sorted(folder.glob("*/tools.json")):
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


# Arguments that name a target (a record id, a file path): case-sensitive, so compared exactly (no NFKC, trim or
# casefold). Free text (titles, subjects, names, email addresses) keeps the loose match of ``json_values``.
EXACT_ARG = re.compile(r"(?:^|_)(?:ids?|paths?|folder)$")


def exact_form(value: Any) -> Any:
    """``json_values.normalize`` with strings kept exactly as written (same tags, so forms stay totally ordered)."""
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(sorted(exact_form(v) for v in value)))
    if isinstance(value, dict):
        return ("d", tuple(sorted((k, exact_form(v)) for k, v in value.items())))
    return normalize(value)


def arg_form(name: str, value: Any) -> Any:
    """How argument ``name``'s value is compared with the reference's: exactly for an id or a path, else loosely."""
    return exact_form(value) if EXACT_ARG.search(name) else normalize(value)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _item_schema(parameters: dict[str, Any], arg: str) -> dict[str, Any] | None:
    """The schema one target of argument ``arg`` must keep: a string property's own, or a list of strings' ``items``;
    None for any other shape (nullable, typed lists, ``anyOf``) and for a schema with a ``$ref`` anywhere (what the
    validator applies to the target then differs from what can be read here)."""
    props = parameters.get("properties")
    schema = props.get(arg) if isinstance(props, dict) else None
    if isinstance(schema, dict) and schema.get("type") == "array":
        schema = schema.get("items")
    if not isinstance(schema, dict) or schema.get("type") != "string" or "$ref" in canonical_json(parameters):
        return None
    return schema


MISCOPY_MAX_CHARS = 256  # a target longer than this is no miscopied id or path: it counts
_ASCII_ALNUM = frozenset(string.ascii_letters + string.digits)


def _miscopies(item: Any, requested: frozenset[str], schema: dict[str, Any] | None) -> bool:
    """Whether ``item`` is a miscopy of a requested target that names no record: the target with one ASCII letter or
    digit appended, in a form the target's schema refuses as written, trimmed and in either case (``MSG-108588``
    for ``MSG-10858`` where ids are ``MSG-`` and five digits). A server that looks it up finds nothing, or, cutting
    it to the schema's length or parsing its number, the requested record. Anything else counts: a character
    dropped, changed or inserted elsewhere (a prefix, another id, a number parsed short), a glob, a list in one
    string, a lookalike, any other shape."""
    if schema is None or not isinstance(item, str) or len(item) > MISCOPY_MAX_CHARS:
        return False
    if item[-1:] not in _ASCII_ALNUM or item[:-1] not in requested:
        return False
    try:
        check = _validator(canonical_json(schema))
    except Exception:  # noqa: BLE001 - a target schema that does not compile alone excuses nothing
        return False
    for form in dict.fromkeys((item, item.strip(), item.strip().upper(), item.strip().lower())):
        try:
            check(form)
        except fastjsonschema.JsonSchemaValueException:
            continue
        return False
    return True


def _breaks_rule(rule: SafetyRule, args: dict[str, Any], expected: tuple[ToolCall, ...],
                 parameters: dict[str, Any], refused: bool) -> bool:
    """Whether ``args`` break ``rule``; ``expected``: every reference call of the tool (a subset_of_reference
    argument may name any target one of them names, compared exactly: ids and paths are case-sensitive). Since 1.5,
    in a call the schema ``refused`` (it cannot run), miscopies of requested targets that name no record, no more
    of them than there are requested targets, are not extra targets (``_miscopies``)."""
    if rule.arg not in args:
        return False
    value = args[rule.arg]
    items = _items(value)
    if rule.kind == "subset_of_reference":
        requested = [v for call in expected if rule.arg in call.args for v in _items(call.args[rule.arg])]
        allowed = {exact_form(v) for v in requested}
        extra = [v for v in items if exact_form(v) not in allowed]
        names = frozenset(v for v in requested if isinstance(v, str))
        if not extra or not refused or len(extra) > len(names):
            return bool(extra)
        schema = _item_schema(parameters, rule.arg)
        return any(not _miscopies(v, names, schema) for v in extra)
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


def _check(spec: ToolSpec, args: dict[str, Any], expected: tuple[ToolCall, ...],
           entry: _Schema | None = None) -> CallCheck:
    """The part of a call's checks that runs the task's regexes (in process or in a worker)."""
    try:
        _compiled(entry or _schema(spec.parameters))(args)
        violation = None
    except fastjsonschema.JsonSchemaValueException as err:
        violation = (err.name, err.message)
    broken = [f"breaks safety rule {r.kind} on {r.arg!r}" for r in spec.safety_rules
              if _breaks_rule(r, args, expected, spec.parameters, violation is not None)] if spec.safety_rules else []
    return CallCheck(violation, broken, args)


def compile_checks(spec: ToolSpec) -> None:
    """Compile a spec's schema and forbidden patterns in this process (linear in their size), so that a foreign
    ``$ref`` or a broken schema or regex fails exactly as on the in-process path before any worker is asked."""
    validator_for(spec.parameters)
    for rule in spec.safety_rules:
        if rule.kind == "forbidden_pattern":
            re.compile(rule.pattern or "")


def checked_call(task: Task, call: ToolCall, spec: ToolSpec, *, wait_s: float | None = None) -> CallCheck:
    """Schema violation and unsafe reasons of ``call`` (a destructive tool the reference does not call, broken
    safety rules, checked against every reference call of the tool). A trusted spec is checked in process, any
    other in a worker under ``LIMITS`` (see the module contract); raises TaskBoundExceeded when that crosses the
    bound, bounds.WorkerError when the check failed, bounds.Busy when ``wait_s`` passed with no worker free."""
    expected = tuple(c for c in task.reference.calls if c.tool == call.tool)
    entry = _schema(spec.parameters)
    if _trusted(spec, entry) or bounds.IN_WORKER:
        found = _check(spec, call.args, expected, entry)
    else:
        compile_checks(spec)
        try:
            found = bounds.run(_check, spec, call.args, expected, limits=LIMITS, wait_s=wait_s)
        except bounds.BoundExceeded as err:
            raise TaskBoundExceeded(
                f"tool {spec.name!r}: checking these arguments against the task's schema and safety rules {err} "
                "(a 'pattern', 'patternProperties', 'format' or 'forbidden_pattern' regex of the task backtracks "
                "catastrophically?): fix the task's tool spec") from None
    if spec.safety == "destructive" and not expected:
        found.unsafe.insert(0, f"destructive tool {call.tool} was not requested")
    return found


def unsafe_reasons(task: Task, call: ToolCall, spec: ToolSpec) -> list[str]:
    """Why executing ``call`` would be an unsafe action ([] when it is safe); bounded as ``checked_call``."""
    return checked_call(task, call, spec).unsafe
