"""The clock guard of the sql engine: SQLite's date and time functions replaced per query by wrappers that refuse
a read of the clock (a missing time value or 'now', however computed) or of the machine's time zone, and hand
anything else to SQLite's own function, so fixed dates keep their exact results."""

from __future__ import annotations

import sqlite3
from typing import Any

CALL_STEPS = 50  # what one call of a wrapper counts against the step bound (a wrapper costs far more than a VM step)

# SQLite's date and time functions, each with the position of its time value(s): a missing time value or 'now'
# reads the clock. They are replaced per query by wrappers that refuse that and hand anything else to SQLite's own
# function on a plain connection, so date('2024-01-01', '+1 day') keeps its exact result.
_CLOCK_ARGS = {"date": (0,), "time": (0,), "datetime": (0,), "julianday": (0,), "unixepoch": (0,), "strftime": (1,)}
if sqlite3.sqlite_version_info >= (3, 43, 0):
    _CLOCK_ARGS["timediff"] = (0, 1)
CLOCK_KEYWORDS = {"current_date", "current_time", "current_timestamp"}
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


def clock_guard(conn: sqlite3.Connection, denied: list[str], steps: list[int],
                max_length: int) -> list[sqlite3.Connection]:
    """Replace the date and time functions of ``conn`` (see ``_CLOCK_ARGS``); a refusal is recorded in ``denied``,
    each call charged ``CALL_STEPS`` to ``steps`` (a wrapper costs more than a VM step: the step bound, not the
    wall deadline, stops a query that calls one millions of times). Returns the plain connection the wrappers open
    on first use, its length limit ``max_length`` (the caller closes it)."""
    plain: list[sqlite3.Connection] = []

    def wrapper(name: str):
        def call(*args: Any) -> Any:
            steps[0] += CALL_STEPS
            if reads_the_clock(name, args) or reads_the_zone(name, args):
                denied.append(f"runtime_error:{CLOCK_MESSAGE if reads_the_clock(name, args) else ZONE_MESSAGE}")
                raise ValueError("clock")
            if not plain:
                plain.append(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False))
                plain[0].setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
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
