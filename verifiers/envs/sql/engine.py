"""The SQL engine of the sql env: a task's tables in an in-memory SQLite database, one read-only query, bounded.

- ``build(state)`` makes a fresh ``:memory:`` database from ``{table: {"columns": [[name, type], ...], "rows":
  [[...], ...]}}``; identifiers are double-quoted, values bound as parameters (never spliced).
- ``run_query(conn, sql, tables)`` runs one query under an authorizer that allows only SELECT, READ, FUNCTION
  (not ``load_extension``, ``fts3_tokenizer``, ``random``, ``randomblob``) and RECURSIVE; anything else raises
  ``QueryError("unsafe")`` at prepare time. A read of the clock is a ``runtime_error`` (``clock``). Bounds:
  ``MAX_STEPS`` VM steps (deterministic) backed by ``MAX_QUERY_S``, ``MAX_ROWS`` rows and ``MAX_BYTES`` fetched,
  ``MAX_LENGTH`` per value, ``MAX_SQL`` of query text. Returns the rows and whether a task table was read.
- ``without_row``: a built database less one row, restored after. ``same_result(a, b, ordered)`` compares result
  sets (numbers within ``REL_TOL``). The full rules: this env's README.md.
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from typing import Any

from flywheel.verifiers.envs.sql.clock import (  # noqa: F401 - re-exported
    CALL_STEPS,
    CLOCK_KEYWORDS,
    CLOCK_MESSAGE,
    ZONE_MESSAGE,
    ZONE_MODIFIERS,
    clock_guard,
    reads_the_clock,
    reads_the_zone,
)
from flywheel.verifiers.envs.sql.literals import blank_literals

MAX_LENGTH = 1_000_000
MAX_SQL = 20_000
MAX_STEPS = 5_000_000
STEP_CHUNK = 10_000
MAX_QUERY_S = 1.5
MAX_ROWS = 10_000
MAX_BYTES = 8 << 20
REL_TOL = 1e-6
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_UNSAFE_FUNCTIONS = {"load_extension", "fts3_tokenizer"}
_NONDETERMINISTIC = {"random", "randomblob"}
_SCHEMA_TABLES = {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class QueryError(Exception):
    """The query failed: ``kind`` is a failure class (unsafe, syntax_error, runtime_error, timeout, too_large)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def quote(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def build(state: dict[str, Any]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA temp_store = MEMORY")
    for table, spec in state.items():
        cols = [(str(c[0]), str(c[1])) for c in spec["columns"]]
        conn.execute(f"CREATE TABLE {quote(table)} ({', '.join(f'{quote(n)} {quote(t)}' for n, t in cols)})")
        marks = ", ".join("?" * len(cols))
        conn.executemany(f"INSERT INTO {quote(table)} VALUES ({marks})", [tuple(r) for r in spec["rows"]])
    # a table-valued function's first use declares its table, which the authorizer sees as an UPDATE of
    # sqlite_master (and denies): use json_each/json_tree once here, before any authorizer, so a query can read them
    conn.execute("SELECT 1 FROM json_each('[]'), json_tree('[]')").fetchall()
    conn.execute("PRAGMA query_only = ON")
    for limit, value in ((sqlite3.SQLITE_LIMIT_ATTACHED, 0), (sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH),
                         (sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL), (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 200),
                         (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 100), (sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0)):
        conn.setlimit(limit, value)
    return conn




def run_query(conn: sqlite3.Connection, sql: str, tables: set[str]) -> tuple[list[tuple[Any, ...]], bool]:
    """(rows, a task table was read); raises QueryError (see the module contract)."""
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate: not text SQLite can read
        raise QueryError("syntax_error", f"the query is not valid text (a lone surrogate at character {err.start})"
                         ) from None
    denied: list[str] = []
    read = [False]
    lower = {t.lower() for t in tables}

    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, _: str | None) -> int:
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in CLOCK_KEYWORDS:
            denied.append(f"runtime_error:{CLOCK_MESSAGE}")
        elif action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _UNSAFE_FUNCTIONS:
            denied.append(f"unsafe:function {arg2}")
        elif action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _NONDETERMINISTIC:
            denied.append(f"runtime_error:function {arg2} is not allowed (nondeterministic)")
        elif action == sqlite3.SQLITE_READ and (arg1 or "").lower() in lower:
            read[0] = True
            return sqlite3.SQLITE_OK
        elif action == sqlite3.SQLITE_READ and (arg1 or "").lower() in _SCHEMA_TABLES:
            return sqlite3.SQLITE_OK
        elif action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() == "sqlite_master" and pragma_function(sql):
            denied.append(f"unsafe:the pragma function {pragma_function(sql)}")  # its first use declares its table
        elif action == sqlite3.SQLITE_PRAGMA:
            denied.append(f"unsafe:PRAGMA {arg1}")
        elif action == sqlite3.SQLITE_READ and (arg1 or "").lower().startswith("sqlite_"):
            denied.append(f"unsafe:reading {arg1}")  # sqlite_dbpage, sqlite_stat*: internals
        elif action == sqlite3.SQLITE_READ:
            return sqlite3.SQLITE_OK  # a CTE, a view or a table-valued function (json_each): no task table
        elif action in _ALLOWED:
            return sqlite3.SQLITE_OK
        else:
            denied.append(f"unsafe:action {action} ({arg1 or ''} {arg2 or ''})".strip())
        return sqlite3.SQLITE_DENY

    steps = [0]
    deadline = time.monotonic() + MAX_QUERY_S

    def progress() -> int:
        steps[0] += STEP_CHUNK
        return int(steps[0] > MAX_STEPS or time.monotonic() > deadline)

    plain = clock_guard(conn, denied, steps, MAX_LENGTH)
    conn.set_authorizer(authorize)
    conn.set_progress_handler(progress, STEP_CHUNK)
    try:
        cursor = conn.execute(sql)
        rows, size = [], 0
        while batch := cursor.fetchmany(256):
            rows.extend(batch)
            size += sum(len(v) if isinstance(v, str | bytes) else 8 for row in batch for v in row)
            if len(rows) > MAX_ROWS or size > MAX_BYTES:
                raise QueryError("too_large", f"more than {MAX_ROWS} rows or {MAX_BYTES >> 20} MiB fetched")
        if denied:  # a refusal always aborts the statement; never let one pass unnoticed
            raise _classify(sqlite3.OperationalError("refused"), denied, steps[0])
        return rows, read[0]
    except sqlite3.Error as err:
        raise _classify(err, denied, steps[0]) from None
    finally:
        conn.set_authorizer(None)
        conn.set_progress_handler(None, 0)
        for helper in plain:
            helper.close()


class without_row:  # noqa: N801 - a context manager used like a function
    """``with without_row(conn, table, index):`` the database of ``build`` less the table's row ``index`` (rows
    are inserted in order: rowid index + 1), restored on exit (a savepoint rolled back), so probing each row
    builds nothing."""

    def __init__(self, conn: sqlite3.Connection, table: str, index: int, columns: list[str]) -> None:
        self.conn, self.table, self.index = conn, table, index
        taken = {c.lower() for c in columns}
        self.rowid = next((a for a in ("rowid", "_rowid_", "oid") if a not in taken), None)

    def __enter__(self) -> bool:
        """Whether the row could be left out (False when the table shadows every rowid alias)."""
        if self.rowid is None:
            return False
        self.conn.execute("PRAGMA query_only = OFF")
        self.conn.execute("SAVEPOINT probe")
        self.conn.execute(f"DELETE FROM {quote(self.table)} WHERE {self.rowid} = ?", (self.index + 1,))
        self.conn.execute("PRAGMA query_only = ON")
        return True

    def __exit__(self, *_: Any) -> None:
        if self.rowid is not None:
            self.conn.execute("PRAGMA query_only = OFF")
            self.conn.execute("ROLLBACK TO probe")
            self.conn.execute("RELEASE probe")
            self.conn.execute("PRAGMA query_only = ON")


def _classify(err: sqlite3.Error, denied: list[str], steps: int) -> QueryError:
    text = str(err)
    if denied:
        kind, _, what = denied[0].partition(":")
        return QueryError(kind, f"not allowed: {what}")
    if "interrupted" in text:
        return QueryError("timeout", f"stopped after {steps} steps (bound {MAX_STEPS}) or {MAX_QUERY_S:g} s")
    if "too big" in text or "too long" in text or "too many" in text or isinstance(err, sqlite3.DataError):
        return QueryError("too_large", text[:200])
    if isinstance(err, sqlite3.ProgrammingError) and "one statement" in text:
        return QueryError("unsafe", "more than one statement")
    if "may not be modified" in text or "readonly database" in text:  # a write SQLite itself refused
        return QueryError("unsafe", text[:200])
    if "syntax error" in text or "incomplete input" in text or "unrecognized token" in text:
        return QueryError("syntax_error", text[:200])
    return QueryError("runtime_error", text[:200])


def pragma_function(sql: str) -> str | None:
    """The first ``pragma_*`` table-valued function a query names outside its '...' literals, or None: its first use
    reaches the authorizer as an update of sqlite_master, so the refusal names the function instead."""
    found = re.search(r"\bpragma_\w+", blank_literals(sql), re.I)
    return found.group() if found else None


def _same_value(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9)
    return type(a) is type(b) and a == b


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    def one(v: Any) -> tuple[int, Any]:
        if v is None:
            return (0, 0)
        if isinstance(v, int | float):
            return (1, float(f"{v:.5g}"))
        return (2, v) if isinstance(v, str) else (3, bytes(v))
    return tuple(one(v) for v in row)


def same_result(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], ordered: bool) -> bool:
    """Equal row lists (``ordered``) or multisets; column names never matter, numbers within REL_TOL."""
    if len(got) != len(want) or any(len(g) != len(w) for g, w in zip(got, want, strict=True)):
        return False

    def rows_equal(g: tuple[Any, ...], w: tuple[Any, ...]) -> bool:
        return all(_same_value(x, y) for x, y in zip(g, w, strict=True))

    if ordered:
        return all(rows_equal(g, w) for g, w in zip(got, want, strict=True))
    if all(rows_equal(g, w) for g, w in zip(sorted(got, key=_key), sorted(want, key=_key), strict=True)):
        return True
    if len(got) > 300:
        return False
    left = list(want)  # rounding put near-equal rows in another order: match greedily
    for g in got:
        hit = next((i for i, w in enumerate(left) if rows_equal(g, w)), None)
        if hit is None:
            return False
        left.pop(hit)
    return True
