"""Entities in a sql task's tables, for the held-back copies of ``variants``: which columns hold one value per row,
which rows refer to a row, and a row cloned as a new entity.

Contract:
- ``unique_columns(spec)``: the text columns of a table whose values are all distinct (names, titles, codes).
- ``referrers(state, table)``: the ``<name>_id`` columns that refer to a table with an ``id`` column.
- ``twins(...)``: the rows that clone a row as a new entity (fresh id and text) with the rows that refer to it;
  a pure function of its arguments and the random generator it is given.
"""

from __future__ import annotations

import random
import re
from typing import Any

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
Row = tuple[str, int]  # (table, index of the row in the task's tables)


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


def names_one(spec: dict[str, Any], row: list[Any], keep: set[str]) -> bool:
    """Whether ``row`` holds a text in ``keep`` in one of its table's ``unique_columns``: the question names this
    entity (the customer 'Maria Lopez'), so a copy must not hold two. A loan of the one member named is no entity."""
    return any(isinstance(row[i], str) and row[i].lower() in keep for i in unique_columns(spec))


def twins(state: dict[str, Any], rows: tuple[Row, ...], keep: set[str], guarded: frozenset[Row],
          rng: random.Random, taken: set[str]) -> dict[str, list[list[Any]]]:
    """The rows a held-back copy adds for each of ``rows`` (``held_back``'s forced clone), by table: the row as a new
    entity (a fresh id; fresh text in its ``unique_columns`` and in every text column whose value no other table
    holds, so a DISTINCT result gains a row too; a text another table holds, a reference such as a flight's
    origin, and a text in ``keep`` stay), and a copy of every row that refers to it (by ``<name>_id``, or by the
    text of a unique column: a flight to a cloned airport) pointing to the new entity, but a ``guarded`` one that
    ``names_one`` entity. Numbers,
    dates, keys and other references stay, so the new entity meets the reference's filters as the original does.
    Fresh ids count on from the largest of the table; ``taken`` (lower-cased texts) grows by the new texts."""
    out: dict[str, list[list[Any]]] = {}
    key = {t: i for t in state if (i := _int_id(state[t])) is not None}
    top = {t: max((r[i] for r in state[t]["rows"]), default=0) for t, i in key.items()}

    def add(table: str, row: list[Any], fresh: set[int]) -> list[Any]:
        new = [fresh_text(v, rng, taken) if i in fresh and not (isinstance(v, str) and v.lower() in keep) else v
               for i, v in enumerate(row)]
        if table in key:
            top[table] += 1
            new[key[table]] = top[table]
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
                if changes and not ((other, n) in guarded and names_one(state[other], ref, keep)):
                    add(other, [changes.get(c, v) for c, v in enumerate(ref)], set(unique_columns(state[other])))
    return out
