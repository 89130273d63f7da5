"""The SQL engine of the sql env: a task's tables in an in-memory SQLite database, one read-only query, bounded.

Contract:
- ``build(state)`` makes a fresh ``:memory:`` database from ``{table: {"columns": [[name, type], ...], "rows":
  [[...], ...]}}``; identifiers are double-quoted with ``"`` doubled, values bound as parameters (never spliced).
- ``run_query(conn, sql)`` runs one query under an authorizer that allows only SELECT, READ (not of sqlite_* internals
  but sqlite_schema), FUNCTION (but ``load_extension``, ``fts3_tokenizer``, ``random``, ``randomblob``) and RECURSIVE:
  ATTACH, PRAGMA (pragma_* table functions too, the refusal naming the function), writes, DDL and transactions are
  denied at prepare time and raise ``QueryError("unsafe")``; json_each/json_tree are set up in ``build`` (their first
  use would report an internal sqlite_master update). A query that reads the clock is a ``runtime_error``: its result
  would change with the day. CURRENT_DATE/TIME/TIMESTAMP are refused by the authorizer; date, time, datetime,
  julianday, unixepoch, strftime (and timediff) are replaced by wrappers that refuse a missing time value or one equal
  to 'now' at run time (any case and spacing, however computed) and hand anything else to SQLite's own function, so
  fixed dates keep their exact results. A query that is not valid text (a lone surrogate) is a ``syntax_error``.
  Limits: ``SQLITE_LIMIT_ATTACHED`` 0, strings/blobs ``MAX_LENGTH``, query text ``MAX_SQL``, ``MAX_STEPS`` VM steps
  (progress handler; deterministic, so a timeout never depends on the load) backed by a ``MAX_QUERY_S`` wall deadline,
  at most ``MAX_ROWS`` rows and ``MAX_BYTES`` bytes fetched; temp storage stays in memory. Returns the rows and whether
  a task table was read.
- ``perturbed(state, task_id, keep)``: a variant's tables (and the base of a held-back copy), a pure function of its
  arguments: rows shuffled, some dropped and some cloned with fresh ids, numbers and dates moved, text renamed (except
  strings in ``keep``, the reference query's literals, case-insensitively); ids, ``*_id`` and ``*year`` values kept; a
  dropped row takes the rows that refer to it by ``<name>_id`` with it (customer_id -> customers: no orphans). A
  variant never drops a row referred to otherwise (manager_id, 'BER' in flights.origin) and clones no row of a table
  with ``unique_columns`` (no two customers 'Wei Chen'). ``held_back(...)``: a held-back copy for grading:
  ``perturbed`` that also drops one or clones one of the given rows (those the reference's result depends on), never
  clones (nor drops at random) a row holding a text the reference names that no other row of its column holds (the
  customer 'Maria Lopez': a second one would make the question ambiguous), then ``relabeled``: every integer of an
  ``id`` or ``*_id`` column mapped one-to-one to another number of 1..3*(ids)+(fixed), the same map in every table
  (joins on keys keep their rows; an id read off the shown rows names another entity or none), except the integers the
  reference compares with an id column (``id_literals``). ``without_row``: a built database less one row, restored
  after (probing the rows a result depends on builds nothing). ``same_result(a, b, ordered)`` compares result sets.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import random
import re
import sqlite3
import time
from typing import Any

MAX_LENGTH = 1_000_000
MAX_SQL = 20_000
MAX_STEPS = 5_000_000
STEP_CHUNK = 10_000
CALL_STEPS = 50  # what one call of a date/time wrapper counts against MAX_STEPS (about 4 us against 0.3 us a step)
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


# SQLite's date and time functions, each with the position of its time value(s): a missing time value or 'now'
# reads the clock. They are replaced per query by wrappers that refuse that and hand anything else to SQLite's own
# function on a plain connection, so date('2024-01-01', '+1 day') keeps its exact result.
_CLOCK_ARGS = {"date": (0,), "time": (0,), "datetime": (0,), "julianday": (0,), "unixepoch": (0,), "strftime": (1,)}
if sqlite3.sqlite_version_info >= (3, 43, 0):
    _CLOCK_ARGS["timediff"] = (0, 1)
_CLOCK_KEYWORDS = {"current_date", "current_time", "current_timestamp"}
CLOCK_MESSAGE = ("the current date or time is not allowed (nondeterministic: the result would change with the day); "
                 "compare with a fixed date")


ZONE_MODIFIERS = {"localtime", "utc"}
ZONE_MESSAGE = ("the 'localtime' and 'utc' modifiers are not allowed (the result would depend on the machine's time "
                "zone); compare dates as stored")


def _text(value: Any) -> str | None:
    """A date function's argument as SQLite reads it, folded: text up to its first NUL (SQLite reads a C string:
    'now' || char(0) || 'x' is 'now' to it), stripped, lower case; None for a number or NULL."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value.split("\0", 1)[0].strip().lower() if isinstance(value, str) else None


def _is_now(value: Any) -> bool:
    return _text(value) == "now"


def reads_the_zone(name: str, args: tuple[Any, ...]) -> bool:
    """Whether a modifier of SQLite's ``name(*args)`` (the arguments after its time value) converts between local
    time and UTC: a result that depends on the machine's time zone."""
    return name != "timediff" and any(_text(a) in ZONE_MODIFIERS for a in args[max(_CLOCK_ARGS[name]) + 1:])


def reads_the_clock(name: str, args: tuple[Any, ...]) -> bool:
    """Whether SQLite's ``name(*args)`` reads the clock: a time value that is missing or 'now' (any case, any
    surrounding whitespace; the value the query computes at run time, so char(110, 111, 119) counts)."""
    positions = _CLOCK_ARGS[name]
    if name == "strftime" and not args:
        return False  # strftime() without a format is NULL
    return any(i >= len(args) or _is_now(args[i]) for i in positions)


def _clock_guard(conn: sqlite3.Connection, denied: list[str], steps: list[int]) -> list[sqlite3.Connection]:
    """Replace the date and time functions of ``conn`` (see ``_CLOCK_ARGS``); a refusal is recorded in ``denied``,
    each call charged ``CALL_STEPS`` to ``steps`` (a wrapper costs more than a VM step: the step bound, not the
    wall deadline, stops a query that calls one millions of times). Returns the plain connection the wrappers open
    on first use (the caller closes it)."""
    plain: list[sqlite3.Connection] = []

    def wrapper(name: str):
        def call(*args: Any) -> Any:
            steps[0] += CALL_STEPS
            if reads_the_clock(name, args) or reads_the_zone(name, args):
                denied.append(f"runtime_error:{CLOCK_MESSAGE if reads_the_clock(name, args) else ZONE_MESSAGE}")
                raise ValueError("clock")
            if not plain:
                plain.append(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False))
                plain[0].setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
            marks = ", ".join("?" * len(args))
            try:
                return plain[0].execute(f"SELECT {name}({marks})", args).fetchone()[0]
            except sqlite3.Error as err:
                text = str(err)
                denied.append(("too_large:" if "too big" in text else "runtime_error:") + f"{name}: {text[:200]}")
                raise
        return call

    for name, positions in _CLOCK_ARGS.items():
        conn.create_function(name, len(positions) if name == "timediff" else -1, wrapper(name), deterministic=True)
    return plain


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
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _CLOCK_KEYWORDS:
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

    plain = _clock_guard(conn, denied, steps)
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


def string_literals(sql: str) -> set[str]:
    """The lower-cased '...' literals of a query (a perturbed copy keeps the text values they name)."""
    return {m.replace("''", "'").lower() for m in re.findall(r"'((?:[^']|'')*)'", sql)}


_COLUMN = r"(?:\w+\.)?[\"`\[]?(?P<column>\w+)[\"`\]]?"  # a column, maybe qualified (o.customer_id) or quoted
_COMPARE = r"\s*(?:==?|!=|<>|<=?|>=?)\s*"
_ID_COMPARISONS = [re.compile(p, re.I) for p in (
    _COLUMN + _COMPARE + r"(?P<numbers>\d+)(?![\w.])",  # customer_id = 5, id <= 3
    r"(?<![\w.])(?P<numbers>\d+)" + _COMPARE + _COLUMN,  # 5 = o.customer_id
    _COLUMN + r"\s+(?:NOT\s+)?IN\s*\((?P<numbers>[\d\s,]+)\)",  # id IN (3, 4)
    _COLUMN + r"\s+(?:NOT\s+)?BETWEEN\s+(?P<numbers>\d+\s+AND\s+\d+)(?![\w.])",
)]


def id_literals(sql: str) -> set[int]:
    """The integers a query compares, outside its '...' literals, with an id column (``_is_id``: ``customer_id =
    5``, ``id IN (3, 4)``, ``5 = o.id``, ``id BETWEEN 2 AND 4``): the ids it names, which keep their entity in a
    held-back copy. A count (LIMIT 5, HAVING COUNT(*) > 2) or a comparison with another column (quantity > 3) names
    no id: fixing it would leave that id unrelabeled, and a query hard-coding it would pass the copies."""
    text = re.sub(r"'(?:[^']|'')*'", "''", sql)
    return {int(n) for pattern in _ID_COMPARISONS for match in pattern.finditer(text)
            if _is_id(match["column"]) for n in re.findall(r"\d+", match["numbers"])}


def pragma_function(sql: str) -> str | None:
    """The first ``pragma_*`` table-valued function a query names outside its '...' literals, or None: its first use
    reaches the authorizer as an update of sqlite_master, so the refusal names the function instead."""
    found = re.search(r"\bpragma_\w+", re.sub(r"'(?:[^']|'')*'", "''", sql), re.I)
    return found.group() if found else None


def _rng(*parts: Any) -> random.Random:
    return random.Random(int(hashlib.sha256(repr(parts).encode()).hexdigest()[:16], 16))


def _is_id(column: str) -> bool:
    """An ``id`` or ``*_id`` column: its integers are relabeled in a held-back copy (``relabeled``)."""
    name = column.lower()
    return name == "id" or name.endswith("_id")


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


Row = tuple[str, int]  # (table, index of the row in the task's tables)


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


def _refers_to(column: str, table: str) -> bool:
    """Whether ``<name>_id`` column names ``table``: ``<name>`` is the table's name, or the name less a trailing
    's' or 'es' (customer_id -> customers, book_id -> books), case-insensitively."""
    name, stem = table.lower(), column.lower().removesuffix("_id")
    return column.lower().endswith("_id") and stem in {name, name.removesuffix("s"), name.removesuffix("es")}


def referrers(state: dict[str, Any], table: str) -> list[tuple[str, int]]:
    """(table, column index) of every ``<name>_id`` column that refers to ``table`` (``_refers_to``), when ``table``
    has an ``id`` column. manager_id -> employees is not guessed (no such table: nothing cascades)."""
    if not any(str(c[0]).lower() == "id" for c in state[table]["columns"]):
        return []
    return [(t, i) for t in sorted(state) for i, c in enumerate(state[t]["columns"]) if _refers_to(str(c[0]), table)]


def unique_columns(spec: dict[str, Any]) -> list[int]:
    """The columns of a table meant to hold one value per row (a name, a title, an airport's code): text, not
    dates, all distinct case-insensitively, in a table of two rows or more."""
    rows = spec["rows"]

    def unique(i: int) -> bool:
        values = [r[i] for r in rows]
        return len(rows) > 1 and all(isinstance(v, str) and not _DATE.match(v) for v in values) and \
            len({v.lower() for v in values}) == len(values)
    return [i for i in range(len(spec["columns"])) if unique(i)]


def anchored(state: dict[str, Any]) -> frozenset[Row]:
    """The rows another row refers to in a way ``_cascade`` does not follow, which a variant never drops (no
    orphans): by an ``*_id`` column that names no table, read as its own table's ``id`` (manager_id ->
    employees), or by a text value of a ``unique_columns`` column held in another table ('BER' in flights.origin
    -> airports.code). Over-approximate: sparing a row too many only drops less."""
    found = set()
    for table, spec in state.items():
        cols = [str(c[0]).lower() for c in spec["columns"]]
        own = {r[i] for i, c in enumerate(cols) if c.endswith("_id") and not any(_refers_to(c, t) for t in state)
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
              guarded: frozenset[Row] | None = None) -> dict[str, Any]:
    """A variant's tables or the base of a held-back copy (see the module contract); a pure function of its
    arguments. ``drop`` rows are always dropped; ``clone`` rows always cloned (besides the random clones) with
    their numbers and dates as they are, so such a clone still meets the reference's filters. ``guarded``: a
    held-back copy's ``protected`` rows, which its random drops and clones spare (a copy without the customer the
    question names answers 0, as would an id read off the shown rows); None for a variant, whose random drops
    spare the ``anchored`` rows and which clones no row of a table with ``unique_columns`` (two customers 'Wei
    Chen' would make the question ambiguous). Either way a dropped row takes the rows that refer to it with it
    (``_cascade``): no orphans."""
    rng = _rng("perturb", task_id, attempt)
    names: dict[str, str] = {}  # one new name per text value: joins on text stay consistent
    entities = {t for t in state if unique_columns(state[t])} if guarded is None else set()
    guarded = anchored(state) if guarded is None else guarded
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
        twins = [list(rows[i]) for t, i in clone if t == table]
        for i, col in enumerate(cols):
            if col.lower() == "id" and all(isinstance(r[i], int) for r in rows):
                top = max((r[i] for r in rows), default=0)
                for n, twin in enumerate(clones + twins, start=1):
                    twin[i] = top + n
        new = [_moved(cols, row, rng, keep, names) for row in kept + clones]
        new += [_moved(cols, row, rng, keep, names, numbers=False) for row in twins]
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
    # drawn from 1..3*len(ids)+len(fixed), never a list sized by the largest id (20240101, 10**15): enough
    # numbers that, the fixed ones left out, every movable id gets its own
    top = 3 * len(ids) + len(fixed)
    drawn = rng.sample(range(1, top + 1), min(top, len(movable) + len(fixed)))
    new = dict(zip(movable, [n for n in drawn if n not in fixed][:len(movable)], strict=True))
    out = {}
    for table, spec in state.items():
        cols = [_is_id(str(c[0])) for c in spec["columns"]]
        rows = [[new.get(v, v) if is_id and type(v) is int else v for is_id, v in zip(cols, row, strict=True)]
                for row in spec["rows"]]
        out[table] = {"columns": spec["columns"], "rows": rows}
    return out


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
    return relabeled(perturbed(state, task_id, keep, attempt, drop, twin, guarded), rng, fixed)


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
