"""Tool schemas for the tool checks: compiled JSON Schema validators that never fetch a ``$ref`` outside the schema,
and the provenance test ``trusted`` (a spec whose schema and forbidden patterns are the shipped catalogs', every
regex there reviewed to run in linear time in ``re``, may be checked in process). See verifiers/README.md."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import FunctionType
from typing import Any, cast

import fastjsonschema

from flywheel.schemas import ToolSpec, canonical_json

SHIPPED_CATALOGS = Path(__file__).resolve().parent / "envs"  # every env folder's tools.json
# Shipped patterns that ``re`` runs in quadratic time, each with an equivalent linear
# pattern that the compiled validator matches with instead (the catalog's text cannot change: task ids hash it;
# error messages keep naming the catalog's pattern). Equivalence, for A = [^@\s]: R matches A+ "\." A+ exactly when
# R = c N* "\." A+ with c in A and N = A minus ".": take the first "." after R's first character.
LINEAR_EQUIVALENTS = {
    r"^[^@\s]+@[^@\s]+\.[^@\s]+$": r"^[^@\s]+@[^@\s][^@\s.]*\.[^@\s]+$",
}


class ForeignReference(ValueError):
    """A tool schema's reference points outside the schema; it is refused, never fetched."""


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
    compiled = cast(FunctionType, validator).__globals__.get("REGEX_PATTERNS", {})  # compile() returns a function
    for pattern, linear in LINEAR_EQUIVALENTS.items():
        if pattern in compiled:
            anchored = compiled[pattern].pattern != pattern
            compiled[pattern] = re.compile(linear.replace("$", r"\Z") if anchored else linear)
    return validator


@lru_cache(maxsize=4096)
def _validator(schema_json: str) -> Validator:
    """A compiled JSON Schema (draft-07) validator, compiled once per schema rather than interpreted per call. No
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


def _violation(name: str | None, message: str) -> str:
    return f"args{name[4:]}: {message[len(name) + 1:].strip()}" if name and name.startswith("data") else message
