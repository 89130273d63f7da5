"""Entities in a sql task's tables, for the held-back copies of ``variants``: which columns hold one value per row,
which rows refer to a row, and a row cloned as a new entity.

Contract:
- ``unique_columns(spec)``: the text columns of a table whose values are all distinct (names, titles, codes).
- ``referrers(state, table)``: the ``<name>_id`` columns that refer to a table with an ``id`` column.
- ``twins(...)``: the rows that clone a row as a new entity (fresh id and text) with the rows that refer to it;
  a pure function of its arguments and the random generator it is given.
- ``fresh_ids(...)``: new ids for clones, drawn at random above every id of the tables (``CLONE_SPAN``), never one
  already taken: the shown rows never tell a clone's id (``id = <largest> + 1`` names no clone).
"""

from __future__ import annotations

import random
import re
from typing import Any

from flywheel.verifiers.envs.sql.literals import is_id

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
Row = tuple[str, int]  # (table, index of the row in the task's tables)
CLONE_SPAN = 100  # a clone's id is drawn from above the largest id of the tables, over this many per id taken


def refers_to(column: str, table: str) -> bool:
    """Whether ``<name>_id`` column names ``table``: ``<name>`` is the table's name, or the name less a trailing
    's' or 'es' (customer_id -> customers, book_id -> books), case-insensitively."""
    name, stem = table.lower(), column.lower().removesuffix("_id")
    return column.lower().endswith("_id") and stem in {name, name.removesuffix("s"), name.removesuffix("es")}


def referrers(state: dict[str, Any], table: str) -> list[tuple[str, int]]:
    """(table, column index) of every ``<name>_id`` column that refers to ``table`` (``refers_to``), when ``table``
    has an ``id`` column. manager_id -> employees is not guessed (no such table: nothing cascades)."""
    if not any(str(c[0]).lower() == "id" for c in state[table]["columns"]):
        return []
    return [(t, i) for t in sorted(state) for i, c in enumerate(state[t]["columns"]) if refers_to(str(c[0]), table)]


def unique_columns(spec: dict[str, Any]) -> list[int]:
    """The columns of a table meant to hold one value per row (a name, a title, an airport's code): text, not
    dates, all distinct case-insensitively, in a table of two rows or more."""
    rows = spec["rows"]

    def unique(i: int) -> bool:
        values = [r[i] for r in rows]
        return len(rows) > 1 and all(isinstance(v, str) and not _DATE.match(v) for v in values) and \
            len({v.lower() for v in values}) == len(values)
    return [i for i in range(len(spec["columns"])) if unique(i)]


def fresh_text(value: Any, rng: random.Random, taken: set[str]) -> Any:
    """A new text for a new entity: ``value`` and a suffix no text of the tables holds (so a prefix LIKE on the
    original still matches); a number or a date as it is."""
    if not isinstance(value, str) or _DATE.match(value):
        return value
    while (new := f"{value} {rng.choice('KLMNPRSTVWXZ')}{rng.randint(10, 99)}").lower() in taken:
        pass
    taken.add(new.lower())
    return new


def texts(state: dict[str, Any]) -> set[str]:
    return {v.lower() for spec in state.values() for r in spec["rows"] for v in r if isinstance(v, str)}


def _int_id(spec: dict[str, Any]) -> int | None:
    """The index of a table's ``id`` column when every value there is an integer (fresh ids count on), else None."""
    cols = [str(c[0]).lower() for c in spec["columns"]]
    index = cols.index("id") if "id" in cols else None
    return index if index is not None and all(isinstance(r[index], int) for r in spec["rows"]) else None


def fresh_ids(rng: random.Random, taken: set[int], count: int) -> list[int]:
    """``count`` new ids, none in ``taken`` (which grows by them): drawn from the ``CLONE_SPAN * (len(taken) +
    count)`` integers above the largest taken, so neither the largest shown id plus one nor any other id read off
    the shown rows names a clone, and a copy's relabeling moves each (it is no id the reference names)."""
    low = max(taken, default=0) + 1
    span = CLONE_SPAN * (len(taken) + count + 1)
    out = []
    while len(out) < count:
        if (new := rng.randrange(low, low + span)) not in taken:
            taken.add(new)
            out.append(new)
    return out


def id_values(state: dict[str, Any]) -> set[int]:
    """The integers of every ``id`` and ``*_id`` column of the tables."""
    return {r[i] for spec in state.values() for i, c in enumerate(spec["columns"]) if is_id(str(c[0]))
            for r in spec["rows"] if type(r[i]) is int}


def is_event_table(state: dict[str, Any], table: str) -> bool:
    """Whether ``table``'s rows are events of the entities of other tables: it refers to another table through a
    ``<name>_id`` column (``referrers``: a loan's book_id, an order's customer_id) and no table refers to it. Its
    distinct texts are values, not names (the member of the only loan of a small loans table), and a copy may
    hold them twice (a second loan of the member the question names)."""
    refers = any(t != table for t in state for other, _ in referrers(state, t) if other == table)
    return refers and not referrers(state, table)


def names_one(state: dict[str, Any], table: str, row: list[Any], keep: set[str]) -> bool:
    """Whether ``row`` holds a text in ``keep`` in one of its table's ``unique_columns``: the question names this
    entity (the customer 'Maria Lopez'), so a copy must not hold two. A row of an ``is_event_table`` names none:
    a loan of the one member named is no entity, even when every loan of the table has another member."""
    return not is_event_table(state, table) and \
        any(isinstance(row[i], str) and row[i].lower() in keep for i in unique_columns(state[table]))


def twins(state: dict[str, Any], rows: tuple[Row, ...], keep: set[str], guarded: frozenset[Row],
          rng: random.Random, taken: set[str], ids: set[int] | None = None) -> dict[str, list[list[Any]]]:
    """The rows a held-back copy adds for each of ``rows`` (``held_back``'s forced clone), by table: the row as a new
    entity (a fresh id; fresh text in its ``unique_columns`` and in every text column whose value no other table
    holds, so a DISTINCT result gains a row too; a text another table holds, a reference such as a flight's
    origin, and a text in ``keep`` stay), and a copy of every row that refers to it (by ``<name>_id``, or by the
    text of a unique column: a flight to a cloned airport) pointing to the new entity, but a ``guarded`` one that
    ``names_one`` entity. Numbers,
    dates, keys and other references stay, so the new entity meets the reference's filters as the original does.
    Fresh ids are ``fresh_ids`` (none in ``ids``, by default ``id_values``, which grows by them); ``taken``
    (lower-cased texts) grows by the new texts."""
    out: dict[str, list[list[Any]]] = {}
    key = {t: i for t in state if (i := _int_id(state[t])) is not None}
    ids = id_values(state) if ids is None else ids

    def add(table: str, row: list[Any], fresh: set[int]) -> list[Any]:
        new = [fresh_text(v, rng, taken) if i in fresh and not (isinstance(v, str) and v.lower() in keep) else v
               for i, v in enumerate(row)]
        if table in key:
            new[key[table]] = fresh_ids(rng, ids, 1)[0]
        out.setdefault(table, []).append(new)
        return new

    for table, index in rows:
        spec, row = state[table], state[table]["rows"][index]
        elsewhere = {v.lower() for t in state if t != table for r in state[t]["rows"] for v in r if isinstance(v, str)}
        unique = set(unique_columns(spec))
        fresh = unique | {i for i, v in enumerate(row) if isinstance(v, str) and v.lower() not in elsewhere}
        new = add(table, list(row), fresh)
        links = {i: new[i] for i in unique if new[i] != row[i]}  # the entity's old text -> its new one
        old_id, new_id = (row[key[table]], new[key[table]]) if table in key else (None, None)
        for other in sorted(state):
            by_id = [c for t, c in referrers(state, table) if t == other] if table in key else []
            for n, ref in enumerate(state[other]["rows"]):
                changes = {c: new_id for c in by_id if ref[c] == old_id}
                if other != table:
                    changes |= {c: links[i] for i in links for c, v in enumerate(ref) if v == row[i]}
                if changes and not ((other, n) in guarded and names_one(state, other, ref, keep)):
                    add(other, [changes.get(c, v) for c, v in enumerate(ref)], set(unique_columns(state[other])))
    return out
