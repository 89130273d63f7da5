"""Attacks on the sql verifier's engine: clock reads the 'now'-literal check missed (the verdict changed with the
day, and such a reference was accepted), table-valued functions refused as unsafe, a correct query followed by an
empty statement charged -1, and a completion that broke the verifier (valid=False) instead of failing. Each case
failed on the old code."""

from __future__ import annotations

import json
import sqlite3

import pytest

from flywheel.schemas import SeedTask, Task, TaskMeta
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.sql import engine, sql

SQL = get_env("sql")
GOOD = "SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = 'Maria Lopez'"


def sales_tables() -> dict:
    seed = next(SeedTask.model_validate({**json.loads(line), "env": "sql"})
                for line in SQL.seeds_path.read_text(encoding="utf-8").splitlines() if '"sales-1"' in line)
    request = seed.templates[0].format(**seed.values)
    return SQL.render(seed, {}, request, seed.values, TaskMeta(seed_id=seed.id)).reference.state


def sql_task(answer: str = GOOD) -> Task:
    return Task.model_validate({"env": "sql", "messages": [{"role": "user", "content": "q?"}],
                                "reference": {"answer": answer, "state": sales_tables()}, "meta": {"seed_id": "x"}})


CLOCK_READS = ["date()", "time()", "datetime()", "julianday()", "unixepoch()", "strftime('%Y')",
               "date(char(110, 111, 119))", "datetime(' Now ')", "strftime('%s', upper('n' || 'ow'))",
               "date('now', '+1 day')", "CURRENT_TIME", "julianday(CAST('now' AS BLOB))",
               # SQLite reads a C string: 'now' and a NUL is 'now' to it (review probe: these returned today)
               "date(char(110, 111, 119, 0))", "date('now' || char(0) || 'x')", "date(x'6e6f7700')"]


@pytest.mark.parametrize("clock", CLOCK_READS)
def test_every_clock_read_is_refused_in_a_candidate(clock) -> None:
    """Before: `... AND date() > '2000-01-01'` (or julianday(), strftime('%Y'), date(char(110,111,119))) scored 1.0:
    only a literal 'now' and CURRENT_* were looked for in the query text."""
    verdict = sql.verify(sql_task(), f"{GOOD} AND {clock} IS NOT NULL")
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (True, 0.0, "runtime_error"), verdict
    assert "current date" in verdict.details


@pytest.mark.parametrize("clock", ["date()", "strftime('%Y')", "date(char(110, 111, 119))", "unixepoch()"])
def test_a_reference_that_reads_the_clock_is_never_a_reference(clock) -> None:
    """Before: a reference `WHERE order_date <= date()` was accepted and its answer changed with the day."""
    task = sql_task(f"SELECT COUNT(*) FROM orders WHERE order_date <= {clock} OR amount > 100")
    assert SQL.reference_problem(task)[0] == "bad_reference"
    verdict = sql.verify(task, task.reference.answer or "")
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (False, None, "verifier_error"), verdict


@pytest.mark.parametrize("query", ["datetime('2024-01-01', 'localtime')", "date('2024-01-01', ' UTC ')",
                                   "strftime('%H', '2024-01-01 00:00', 'localtime')",
                                   "datetime('2024-01-01', 'utc' || char(0))"])
def test_a_time_zone_modifier_is_refused(query) -> None:
    """'localtime' and 'utc' convert by the machine's time zone: the same query gave 09:00 in Tokyo and 00:00 in
    UTC, so one completion's verdict could differ between workers (review probe)."""
    verdict = sql.verify(sql_task(), f"{GOOD} AND {query} IS NOT NULL")
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (True, 0.0, "runtime_error"), verdict
    assert "time zone" in verdict.details


FIXED = ["date('2024-01-01', '+1 day')", "time('12:00', '+30 minutes')", "datetime(2460000.5)",
         "julianday('2024-02-29 12:00')", "unixepoch('2024-01-01')", "strftime('%Y-%m', '2024-03-05')",
         "date('2024-01-31', 'start of month', '+1 month')", "date(NULL)", "date('not a date')", "strftime()",
         "date('2024-01-01', 'now')", "strftime('now', '2024-01-01')"]


def test_dates_that_do_not_read_the_clock_keep_sqlites_exact_results() -> None:
    plain = sqlite3.connect(":memory:")
    want = plain.execute(f"SELECT {', '.join(FIXED)}").fetchone()
    conn = engine.build(sales_tables())
    got = engine.run_query(conn, f"SELECT {', '.join(FIXED)} FROM orders LIMIT 1", {"orders"})[0][0]
    assert [(type(v), v) for v in got] == [(type(v), v) for v in want]
    assert got[0] == "2024-01-02"
    reference = "SELECT COUNT(*) FROM orders WHERE order_date >= date('2026-01-01', '+3 months')"
    task = sql_task(reference)
    assert SQL.reference_problem(task) is None
    for candidate in (reference, "SELECT COUNT(*) FROM orders WHERE julianday(order_date) >= julianday('2026-04-01')"):
        assert sql.verify(task, candidate).reward == 1.0


@pytest.mark.parametrize("query", [
    f"{GOOD} AND c.name IN (SELECT value FROM json_each('[\"Maria Lopez\"]'))",
    f"{GOOD} AND EXISTS (SELECT 1 FROM json_tree('{{\"a\": [1]}}') WHERE atom = 1)",
])
def test_json_table_valued_functions_are_allowed(query) -> None:
    """Before: -1 unsafe, 'action 23 (sqlite_master type)': their first use reports an internal schema update."""
    verdict = sql.verify(sql_task(), query)
    assert (verdict.reward, verdict.failure_class) == (1.0, None), verdict


@pytest.mark.parametrize("query", [
    "CREATE VIRTUAL TABLE v USING json_each", "UPDATE sqlite_master SET sql = ''",
    "INSERT INTO orders SELECT * FROM orders", "UPDATE orders SET amount = (SELECT value FROM json_each('[0]'))",
    "CREATE TEMP VIEW v AS SELECT * FROM json_each('[1]')",
])
def test_writes_are_still_unsafe(query) -> None:
    verdict = sql.verify(sql_task(), query)
    assert (verdict.reward, verdict.failure_class) == (-1.0, "unsafe"), verdict


@pytest.mark.parametrize("tail", [";;", ";\n;", "; /* x */ ;", ";\n-- done\n;", " ; ; ;"])
def test_trailing_empty_statements_are_harmless(tail) -> None:
    """Before: -1 unsafe: the statement count said 1 but Python's sqlite3 refused the empty second statement."""
    verdict = sql.verify(sql_task(), GOOD + tail)
    assert (verdict.reward, verdict.failure_class) == (1.0, None), verdict
    assert SQL.reference_problem(sql_task(GOOD + tail)) is None


@pytest.mark.parametrize("tail", ["; SELECT 1", ";\x00 SELECT 1", ";; SELECT 1;", "; /* ; */ DELETE FROM orders"])
def test_two_real_statements_are_still_unsafe(tail) -> None:
    verdict = sql.verify(sql_task(), GOOD + tail)
    assert (verdict.reward, verdict.failure_class) == (-1.0, "unsafe"), verdict


@pytest.mark.parametrize("completion", ["SELECT '\ud800' FROM orders", f"```sql\n{GOOD} AND '\udfff' <> ''\n```"])
def test_a_lone_surrogate_is_a_failure_of_the_completion_not_of_the_verifier(completion) -> None:
    """Before: UnicodeEncodeError in the worker, valid=False verifier_error: the sample escaped scoring."""
    verdict = sql.verify(sql_task(), completion)
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (True, 0.0, "syntax_error"), verdict
    verdict.model_dump_json().encode("utf-8")  # the verdict itself is writable text
    assert sql.sql_reward([completion], [sql_task()]) == [0.0]


def test_date_wrappers_count_against_the_step_bound() -> None:
    """A wrapper call costs more than a VM step: millions of them stop on the deterministic step bound."""
    conn = engine.build(sales_tables())
    query = ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r, customers "
             "WHERE customers.id = 1 AND date('2024-01-01', '+' || x || ' days') > ''")
    with pytest.raises(engine.QueryError) as err:
        engine.run_query(conn, query, {"customers"})
    assert err.value.kind == "timeout" and "steps" in str(err.value)


@pytest.mark.parametrize(("query", "function"), [
    ("SELECT name FROM pragma_table_info('orders')", "pragma_table_info"),
    ("SELECT COUNT(*) FROM orders, pragma_function_list", "pragma_function_list"),
    ('SELECT * FROM "pragma_database_list"', "pragma_database_list"),
])
def test_a_pragma_function_refusal_names_the_function(query, function) -> None:
    """Before: 'not allowed: action 23 (sqlite_master type)', the schema update its first use reports."""
    verdict = sql.verify(sql_task(), query)
    assert (verdict.reward, verdict.failure_class) == (-1.0, "unsafe"), verdict
    assert function in verdict.details and "sqlite_master" not in verdict.details, verdict.details
