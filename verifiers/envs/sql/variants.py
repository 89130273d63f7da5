"""The tables of the sql env's variants and held-back copies: pure functions of a task's tables, its id and the
reference's literals.

- ``perturbed(state, task_id, keep)``: a variant's tables (and the base of a held-back copy): rows shuffled, some
  dropped (with the rows that refer to them) and some cloned, numbers and dates moved, text renamed except the
  strings in ``keep``; ids, ``*_id`` and ``*year`` values kept; no duplicate names, no orphans.
- ``held_back(...)``: a held-back copy for grading: ``perturbed`` that also drops one or clones one of the given
  rows (those the reference's result depends on) as a new entity (``entities``), never cloning a row that holds a
  text the reference names, then ``relabeled``: every id mapped one-to-one to a number of
  1..SPREAD*(ids)+(fixed), the same map in every table, except the ids the reference compares with an id column
  (``literals.id_literals``).
- ``grown(...)``: the tables plus one such row cloned as a new entity, relabeled: a copy whose result, when it
  depends on that row, has more rows than shown.
The rules and why: this env's README.md.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import re
from typing import Any

from flywheel.verifiers.envs.sql.entities import (
    Row,
    fresh_ids,
    fresh_text,
    id_values,
    referrers,
    refers_to,
    texts,
    twins,
    unique_columns,
)
from flywheel.verifiers.envs.sql.literals import is_id as _is_id

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
SPREAD = 10  # relabeled ids are drawn from 1..SPREAD*(ids)+(fixed): a memorised id list rarely names a row at all


def _rng(*parts: Any) -> random.Random:
    return random.Random(int(hashlib.sha256(repr(parts).encode()).hexdigest()[:16], 16))


def _is_key(column: str) -> bool:
    """A column whose values a perturbation never moves: an id (``_is_id``) or a ``*year``."""
    return _is_id(column) or column.lower().endswith("year")


def _move(value: Any, rng: random.Random, keep: set[str], names: dict[str, str]) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value + rng.choice((-1, 1)) * max(1, round(abs(value) * rng.uniform(0.05, 0.3)))
    if isinstance(value, float):
        return round(value * rng.uniform(0.7, 1.3), 2)
    if isinstance(value, str) and _DATE.match(value):
        try:
            return (dt.date.fromisoformat(value) + dt.timedelta(days=rng.randint(-40, 40))).isoformat()
        except ValueError:
            return value
    if isinstance(value, str) and value.lower() not in keep:
        return names.setdefault(value, f"{value} {rng.choice('KLMNPRSTVWXZ')}{rng.randint(2, 9)}")
    return value


def _moved(cols: list[str], row: list[Any], rng: random.Random, keep: set[str], names: dict[str, str],
           numbers: bool = True) -> list[Any]:
    """A row with its values moved (keys never; numbers and dates only when ``numbers``; text always renamed)."""
    def moves(column: str, value: Any) -> bool:
        return not _is_key(column) and (numbers or (isinstance(value, str) and not _DATE.match(value)))
    return [_move(v, rng, keep, names) if moves(c, v) else v for c, v in zip(cols, row, strict=True)]


def protected(state: dict[str, Any], keep: set[str]) -> frozenset[Row]:
    """The rows a held-back copy never clones: those holding, in some column, a text value in ``keep`` (the
    reference's literals, case-insensitively) that no other row of the shown table holds in that column. A clone
    of one would make the entity the question names (the customer 'Maria Lopez', the boss) ambiguous, which no
    query can resolve; a value many rows share (a team, a currency) names no one row and its rows stay clonable."""
    found = set()
    for table, spec in state.items():
        rows = spec["rows"]
        for c in range(len(spec["columns"])):
            texts = [r[c].lower() if isinstance(r[c], str) else None for r in rows]
            found |= {(table, i) for i, t in enumerate(texts) if t is not None and t in keep and texts.count(t) == 1}
    return frozenset(found)


def anchored(state: dict[str, Any]) -> frozenset[Row]:
    """The rows another row refers to in a way ``_cascade`` does not follow, which a variant never drops (no
    orphans): by an ``*_id`` column that names no table, read as its own table's ``id`` (manager_id ->
    employees), or by a text value of a ``unique_columns`` column held in another table ('BER' in flights.origin
    -> airports.code). Over-approximate: sparing a row too many only drops less."""
    found = set()
    for table, spec in state.items():
        cols = [str(c[0]).lower() for c in spec["columns"]]
        own = {r[i] for i, c in enumerate(cols) if c.endswith("_id") and not any(refers_to(c, t) for t in state)
               for r in spec["rows"]}
        texts = {v for t in state if t != table for r in state[t]["rows"] for v in r if isinstance(v, str)}
        unique = unique_columns(spec)
        found |= {(table, n) for n, r in enumerate(spec["rows"])
                  if ("id" in cols and r[cols.index("id")] in own) or any(r[i] in texts for i in unique)}
    return frozenset(found)


def _cascade(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Drop (in ``after``, in place) the rows that refer through a ``<name>_id`` column (``referrers``) to a row
    of ``before`` that ``after`` lacks, and so on down (an order's items), until none is left: no copy holds an
    order of a dropped customer, so a LEFT JOIN meets no orphan the shown tables do not hold."""
    def id_col(table: str) -> int:
        return next(i for i, c in enumerate(before[table]["columns"]) if str(c[0]).lower() == "id")

    refs = {t: referrers(before, t) for t in sorted(before)}
    gone = {t: {r[id_col(t)] for r in before[t]["rows"]} - {r[id_col(t)] for r in after[t]["rows"]}
            for t in refs if refs[t]}
    while any(gone.values()):
        more: dict[str, set[Any]] = {}
        for parent, ids in gone.items():
            for table, col in refs[parent] if ids else ():
                rows = after[table]["rows"]
                after[table] = {**after[table], "rows": [r for r in rows if r[col] not in ids]}
                if refs[table]:
                    more.setdefault(table, set()).update(r[id_col(table)] for r in rows if r[col] in ids)
        gone = more


def perturbed(state: dict[str, Any], task_id: str, keep: set[str], attempt: int = 0,
              drop: frozenset[Row] = frozenset(), clone: tuple[Row, ...] = (),
              guarded: frozenset[Row] | None = None, fixed: frozenset[int] = frozenset()) -> dict[str, Any]:
    """A variant's tables or the base of a held-back copy (see the module contract); a pure function of its
    arguments. ``drop`` rows are always dropped; ``clone`` rows always cloned as new entities (``twins``) with
    their numbers and dates as they are, so such a clone still meets the reference's filters. ``guarded``: a
    held-back copy's ``protected`` rows, which its random drops and clones spare (a copy without the customer the
    question names answers 0, as would an id read off the shown rows), and whose random clones of a row of a table
    with ``unique_columns`` are new entities (fresh text there: two airports 'DUB' would be no airports table);
    None for a variant, whose random drops spare the ``anchored`` rows and which clones no row of a table with
    ``unique_columns`` (two customers 'Wei Chen' would make the question ambiguous). Either way a dropped row takes
    the rows that refer to it with it (``_cascade``): no orphans. Every clone takes a ``fresh_ids`` id (none of
    the tables' ids nor ``fixed``, the ids the reference names), never the largest id plus one."""
    rng = _rng("perturb", task_id, attempt)
    fresh_rng, taken = _rng("fresh", task_id, attempt), texts(state)
    names: dict[str, str] = {}  # one new name per text value: joins on text stay consistent
    entities = {t for t in state if unique_columns(state[t])} if guarded is None else set()
    guarded = anchored(state) if guarded is None else guarded
    ids = id_values(state) | set(fixed)
    added = twins(state, clone, keep, guarded, fresh_rng, taken, ids)
    out = {}
    for table in sorted(state):
        spec = state[table]
        cols = [str(c[0]) for c in spec["columns"]]
        rows = [list(r) for r in spec["rows"]]
        kept = [r for i, r in enumerate(rows)
                if (rng.random() > 0.2 or (table, i) in guarded) and (table, i) not in drop] or \
            [r for i, r in enumerate(rows) if (table, i) not in drop][:1]
        pool = [r for i, r in enumerate(rows) if (table, i) not in guarded and table not in entities]
        count = rng.randint(1, max(1, len(rows) // 3)) if rows else 0
        clones = [list(rng.choice(pool)) for _ in range(count)] if pool else []
        extra = added.get(table, [])
        unique = unique_columns(spec)
        for i, col in enumerate(cols):
            if col.lower() == "id" and all(isinstance(r[i], int) for r in rows):
                for twin, new_id in zip(clones, fresh_ids(fresh_rng, ids, len(clones)), strict=True):
                    twin[i] = new_id
            elif i in unique:  # a random clone of an entity is a new entity (copies only: variants clone none)
                for twin in clones:
                    twin[i] = fresh_text(twin[i], fresh_rng, taken)
        new = [_moved(cols, row, rng, keep, names) for row in kept + clones]
        new += [_moved(cols, row, rng, keep, names, numbers=False) for row in extra]
        rng.shuffle(new)
        out[table] = {"columns": spec["columns"], "rows": new}
    _cascade(state, out)
    return out


def _ids(state: dict[str, Any]) -> list[int]:
    """The integers of every ``id`` and ``*_id`` column, sorted, each once."""
    found = set()
    for spec in state.values():
        for i, col in enumerate(spec["columns"]):
            if _is_id(str(col[0])):
                found |= {r[i] for r in spec["rows"] if type(r[i]) is int}
    return sorted(found)


def relabeled(state: dict[str, Any], rng: random.Random, fixed: set[int]) -> dict[str, Any]:
    """The tables with every integer of an ``id`` or ``*_id`` column replaced through one random one-to-one map
    (the same in every table, so a key and the keys that refer to it stay equal); integers in ``fixed`` keep
    their value, and no other takes it."""
    ids = _ids(state)
    movable = [v for v in ids if v not in fixed]
    # drawn from 1..SPREAD*len(ids)+len(fixed), never a list sized by the largest id (20240101, 10**15): enough
    # numbers that, the fixed ones left out, every movable id gets its own, and few that an id read off the shown
    # rows (or a memorised list of them) lands on a row of the copy
    top = SPREAD * len(ids) + len(fixed)
    drawn = rng.sample(range(1, top + 1), min(top, len(movable) + len(fixed)))
    new = dict(zip(movable, [n for n in drawn if n not in fixed][:len(movable)], strict=True))
    out = {}
    for table, spec in state.items():
        cols = [_is_id(str(c[0])) for c in spec["columns"]]
        rows = [[new.get(v, v) if is_id and type(v) is int else v for is_id, v in zip(cols, row, strict=True)]
                for row in spec["rows"]]
        out[table] = {"columns": spec["columns"], "rows": rows}
    return out


def grown(state: dict[str, Any], task_id: str, keep: set[str], row: Row, fixed: set[int]) -> dict[str, Any]:
    """A held-back copy that only adds rows: the tables plus ``row`` cloned as a new entity with the rows that refer
    to it (``twins``), shuffled, then ``relabeled``. A result that depends on ``row`` (a DISTINCT one too) gains a
    row, so the reference plus LIMIT <rows shown> fails here; random drops would have offset that in a copy."""
    rng = _rng("grown", task_id, row)
    added = twins(state, (row,), keep, protected(state, keep), rng, texts(state), id_values(state) | fixed)
    out = {}
    for table, spec in state.items():
        rows = [list(r) for r in spec["rows"]] + added.get(table, [])
        rng.shuffle(rows)
        out[table] = {"columns": spec["columns"], "rows": rows}
    return relabeled(out, rng, fixed)


def held_back(state: dict[str, Any], task_id: str, keep: set[str], attempt: int, selected: list[Row],
              fixed: set[int]) -> dict[str, Any]:
    """Held-back copy ``attempt`` (see the module contract): one of the ``selected`` rows (when there are any)
    dropped in even attempts, cloned in odd ones (both in one copy could cancel out; attempts 2k and 2k+1 take the
    k-th of the rows in an order drawn from the task id; a clone only among the rows that are not ``protected``,
    none when every selected row is), then the ids relabeled; a pure function of its arguments."""
    rng = _rng("held-back", task_id, attempt)
    rows = sorted(selected)
    _rng("held-back", task_id).shuffle(rows)
    guarded = protected(state, keep)  # once per copy: perturbed spares the same rows
    clonable = [r for r in rows if r not in guarded]
    drop: frozenset[Row] = frozenset()
    twin: tuple[Row, ...] = ()
    if rows and attempt % 2 == 0:
        drop = frozenset({rows[attempt // 2 % len(rows)]})
    elif clonable and attempt % 2 == 1:
        twin = (clonable[attempt // 2 % len(clonable)],)
    return relabeled(perturbed(state, task_id, keep, attempt, drop, twin, guarded, frozenset(fixed)), rng, fixed)
