"""Frozen pydantic v2 records shared by every stage.

Contract:
- Every record is immutable and rejects unknown fields, so a typo in a seed or
  a config fails at load time with the field's name.
- ``Task.id`` is the sha256 of the task's canonical JSON (sorted keys, compact
  separators) over ``env, messages, tools, reference`` only; run metadata in
  ``meta`` (generator, row seed, ...) never changes the id. A given ``id`` that
  does not match the content is rejected.
- Trajectories use the OpenAI chat message format (role, content, tool_calls).
- A tool's JSON Schema is self-contained: every ``$ref`` is a ``#...`` pointer into the same schema, and no
  ``$id`` (or URI-like draft-04 ``id``) moves the base those pointers resolve against; a schema that would make a
  validator fetch a URL or read a file is refused with the offending reference named.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SafetyClass = Literal["read", "write", "destructive"]
FailureClass = Literal[
    "format_error", "wrong_tool", "wrong_args", "schema_violation", "unsafe_action", "verifier_error"
]
MAX_SEED = 2**32 - 1  # a run seed's bound (configs): numpy's and transformers.set_seed's range


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:  # the first key seen twice
            if key in seen:
                raise ValueError(f"not JSON: duplicate key {json.dumps(key)[:80]} in one object; keep one of them")
            seen.add(key)
    return obj


def strict_json(line: bytes) -> Any:
    """One JSON text (a JSONL line) parsed strictly, RFC 8259 in UTF-8: not UTF-8, NaN or Infinity, a lone surrogate
    escape (``"\\ud800"``), a number out of double range, a duplicate key or more than 1024 levels of nesting is a
    ValueError that says what is wrong and how to fix it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte 0x{line[exc.start]:02x} at column {exc.start + 1}); "
                         "re-encode the file as UTF-8") from None
    try:
        value = orjson.loads(text)  # refuses NaN, Infinity, lone surrogates and numbers out of double range
    except orjson.JSONDecodeError as exc:
        hint = "; NaN and Infinity are not JSON: write null or a string" if any(
            w in text for w in ("NaN", "Infinity")) else ""
        where = re.sub(r"line 1 column (\d+) \(char \d+\)", r"column \1", str(exc))  # the line is one line
        raise ValueError(f"not JSON: {where}{hint}") from None
    try:
        json.loads(text, object_pairs_hook=_unique_keys)  # orjson keeps the last of duplicate keys silently
    except RecursionError:
        raise ValueError("not JSON: nested too deeply to parse; flatten it") from None
    return value


def folder_name(name: str) -> str:
    """``name`` when it is one folder name (what ``DIR/<name>/`` may be); ValueError otherwise: a dataset name
    becomes a folder, so '..', a '/' or a NUL would put it somewhere else."""
    if name in (".", "..") or not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", name):  # also printed in UI artifacts
        raise ValueError(f"{name!r} is not a folder name: use letters, digits, '-', '_' or '.' (at most 128), "
                         "without '/'")
    return name


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SafetyRule(Record):
    """A rule a call's arguments must keep for the call to count as safe.

    - ``subset_of_reference``: every item of list argument ``arg`` must appear in
      the reference call's value (no deleting more than the request names).
    - ``forbidden_values``: ``arg`` must not equal any of ``values``.
    - ``forbidden_pattern``: string ``arg`` must not match regex ``pattern`` (Python ``re``; one that does not
      compile is refused here; how long it may run is the verifier's bound, see verifiers/envs/tool_call/tool_call.py).
    """

    kind: Literal["subset_of_reference", "forbidden_values", "forbidden_pattern"]
    arg: str
    values: tuple[Any, ...] = ()
    pattern: str | None = None

    @model_validator(mode="after")
    def _check(self) -> SafetyRule:
        if self.kind == "forbidden_pattern" and not self.pattern:
            raise ValueError("safety rule 'forbidden_pattern' needs a 'pattern'")
        if self.kind == "forbidden_pattern":
            try:
                re.compile(self.pattern or "")
            except re.error as err:
                raise ValueError(f"safety rule 'forbidden_pattern': {self.pattern!r} "
                                 f"is not a Python regex ({err})") from None
        if self.kind == "forbidden_values" and not self.values:
            raise ValueError("safety rule 'forbidden_values' needs non-empty 'values'")
        return self


def foreign_reference(schema: Any) -> str | None:
    """The first reference in a JSON Schema that could resolve outside it (a URL, a file), else None."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):  # a non-string "$ref" is a property name, not a ref
            return f"$ref {ref!r}"
        if isinstance(node.get("$id"), str):
            return f"$id {node['$id']!r}"
        if isinstance(node.get("id"), str) and (":" in node["id"] or "#" in node["id"]):
            return f"id {node['id']!r}"
        stack.extend(node.values())
    return None


class ToolSpec(Record):
    """One tool offered to the policy: JSON Schema for its arguments plus safety."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any]
    safety: SafetyClass
    safety_rules: tuple[SafetyRule, ...] = ()

    @field_validator("parameters")
    @classmethod
    def _self_contained(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        # Validators resolve references by fetching them: a task must never make the verifier open a URL or a file.
        found = foreign_reference(parameters)
        if found:
            raise ValueError(f"{found} leaves the tool's schema: use only '#/...' references within it")
        return parameters


class ToolCall(Record):
    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class Message(Record):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class CodeTest(Record):
    """One unit test of a code task: the entry point's arguments and the expected return value (JSON)."""

    args: tuple[Any, ...] = ()
    expected: Any = None


class Reference(Record):
    """What a correct completion does, per env: expected tool calls (tool_call; the gold action sequence for
    workplace), an answer (math, cli; the reference solution for code), unit tests and an entry point (code),
    the initial and golden final state (workplace), a rubric (judge)."""

    calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    tests: tuple[CodeTest, ...] = ()
    entry_point: str | None = None
    state: dict[str, Any] | None = None
    final_state: dict[str, Any] | None = None
    rubric: str | None = None


# Fields added after the first published datasets stay out of a task's id while unset, so those ids stay valid.
_LATER_REFERENCE_FIELDS = ("tests", "entry_point", "state", "final_state", "rubric")


class TaskMeta(Record):
    seed_id: str
    generator: str = "seed"
    row_seed: int | None = None
    variant: int | None = None
    category: str = ""


class Task(Record):
    id: str = ""
    env: str = Field(min_length=1)
    messages: tuple[Message, ...] = Field(min_length=1)
    tools: tuple[ToolSpec, ...] = ()
    reference: Reference
    meta: TaskMeta

    @model_validator(mode="after")
    def _content_id(self) -> Task:
        computed = self.content_id()
        if self.id and self.id != computed:
            raise ValueError(f"task id {self.id[:12]}... does not match its content ({computed[:12]}...)")
        object.__setattr__(self, "id", computed)
        return self

    def content_id(self) -> str:
        content = self.model_dump(mode="json", include={"env", "messages", "tools", "reference"})
        for key in _LATER_REFERENCE_FIELDS:
            if content["reference"][key] in (None, []):
                del content["reference"][key]
        return sha256_text(canonical_json(content))

    @property
    def prompt(self) -> str:
        """The last user message: the text dedupe and the split look at."""
        return next(m.content or "" for m in reversed(self.messages) if m.role == "user")

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


class Verdict(Record):
    reward: float | None
    valid: bool
    failure_class: FailureClass | str | None = None
    components: dict[str, float] = Field(default_factory=dict)
    details: str = ""
    verifier: str = ""
    verifier_version: str = ""


class Rollout(Record):
    task_id: str
    policy_version: str
    sample_index: int = Field(ge=0)
    seed: int
    messages: tuple[Message, ...]
    verdict: Verdict
    latency_s: float = Field(ge=0)
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)


class DatasetManifest(Record):
    name: str  # the folder the versions lie in: DIR/<name>/<version>/
    version: str
    env: str
    content_hash: str
    files: dict[str, str]
    counts: dict[str, int]
    stage_counts: dict[str, dict[str, int]]
    reject_reasons: dict[str, int]
    params: dict[str, Any]
    run_seed: int
    code_version: str
    seeds_hash: str
    parents: tuple[str, ...] = ()
    created_at: str
    # env -> version of the verifier that checked the references this publish wrote (empty: an older manifest)
    verifiers: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return folder_name(name)
