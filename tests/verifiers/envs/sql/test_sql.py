"""The sql env end to end with real SQLite: attacks, the hack defence, determinism of variants, no file system."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.schemas import SeedTask, Task
from flywheel.tasks.data.generate import candidate
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.sql import engine, sql, variants

SPEC = get_env("sql")
SEEDS = [SeedTask.model_validate({**json.loads(line), "env": "sql"})
         for line in SPEC.seeds_path.read_text(encoding="utf-8").splitlines()]


def seed_task(seed_id: str) -> Task:
    seed = next(s for s in SEEDS if s.id == seed_id)
    request = seed.templates[0].format(**seed.values)
    from flywheel.schemas import TaskMeta

    return SPEC.render(seed, {}, request, seed.values, TaskMeta(seed_id=seed.id, category=seed.category))


def reference_rows(task: Task) -> list[tuple]:
    conn = engine.build(task.reference.state or {})
    return engine.run_query(conn, task.reference.answer or "", set(task.reference.state or {}))[0]


def test_seeds_cover_four_schemas_and_every_seed_is_valid() -> None:
    assert len(SEEDS) >= 20 and len({s.category.split("_")[0] for s in SEEDS}) >= 4
    for seed in SEEDS:
        SPEC.check_seed(seed)
        task = seed_task(seed.id)
        assert SPEC.check_reference(task) is None, seed.id
        assert "CREATE TABLE" in task.messages[0].content and task.prompt.strip()


@pytest.mark.parametrize("statement", [
    "ATTACH DATABASE '{path}' AS x",
    "SELECT * FROM orders; ATTACH DATABASE '{path}' AS x",
    "VACUUM INTO '{path}'",
])
def test_the_file_system_is_not_reachable(tmp_path: Path, statement: str) -> None:
    target = tmp_path / "stolen.db"
    verdict = sql.verify(seed_task("sales-1"), statement.format(path=target))
    assert (verdict.reward, verdict.failure_class) == (-1.0, "unsafe"), verdict.details
    assert not target.exists()


@pytest.mark.parametrize(("completion", "reward", "failure"), [
    ("INSERT INTO orders VALUES (99, 1, '2026-01-01', 1.0, 'EUR')", -1.0, "unsafe"),
    ("UPDATE orders SET amount = 0", -1.0, "unsafe"),
    ("DELETE FROM orders", -1.0, "unsafe"),
    ("DROP TABLE customers", -1.0, "unsafe"),
    ("CREATE TEMP TABLE t AS SELECT * FROM orders", -1.0, "unsafe"),
    ("BEGIN", -1.0, "unsafe"),
    ("PRAGMA writable_schema = 1", -1.0, "unsafe"),
    ("SELECT load_extension('x') FROM orders", -1.0, "unsafe"),
    ("SELECT * FROM sqlite_dbpage", 0.0, "runtime_error"),  # not compiled in; a build with it: -1 unsafe
    ("SELECT COUNT(*) FROM orders;\n-- done\nSELECT 1", -1.0, "unsafe"),
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = 'Maria Lopez' -- a;b",
     1.0, None),
    ("SELECT 4", 0.0, "no_table_read"),
    ("SELECT 4 FROM customers LIMIT 1", 0.0, "hardcoded_result"),
    ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r", 0.0, "timeout"),
    ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r", 0.0, "too_large"),
    ("SELECT a.id FROM orders a, orders b, orders c, orders d, orders e, orders f", 0.0, "too_large"),
    ("SELECT zeroblob(100000000) FROM orders", 0.0, "too_large"),
    ("SELECT 'x" + "y" * 30_000 + "' FROM orders", 0.0, "too_large"),
])
def test_attacks_and_bounds(completion: str, reward: float, failure: str | None) -> None:
    verdict = sql.verify(seed_task("sales-1"), completion)
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (reward, failure, True), verdict.details
    assert verdict.verifier == "sql" and verdict.verifier_version


def test_literal_values_of_every_seed_do_not_count() -> None:
    """The hack: select the reference result's literal values. With a token table read it matches the shown tables
    and must fail on the held-back copy for every seed."""
    for seed in SEEDS:
        task = seed_task(seed.id)
        rows = reference_rows(task)
        table = next(iter(task.reference.state or {}))
        hack = " UNION ALL ".join("SELECT " + ", ".join("NULL" if v is None else repr(v) for v in row)
                                  + f" FROM {table} WHERE rowid = 1" for row in rows)
        if sql.top_level_order_by(task.reference.answer or ""):
            hack = f"SELECT * FROM ({hack})"
        verdict = sql.verify(task, hack)
        assert verdict.reward == 0.0, (seed.id, verdict)
        assert verdict.failure_class in ("hardcoded_result", "wrong_result"), (seed.id, verdict)


def test_variants_are_deterministic_and_change_the_reference_result() -> None:
    first = [candidate(k, SEEDS, {}, 7)[0] for k in range(2 * len(SEEDS))]
    again = [candidate(k, SEEDS, {}, 7)[0] for k in range(2 * len(SEEDS))]
    assert [t.id for t in first] == [t.id for t in again]
    assert [t.id for t in first] != [candidate(k, SEEDS, {}, 8)[0].id for k in range(2 * len(SEEDS))]
    changed = sum(reference_rows(t) != reference_rows(seed_task(t.meta.seed_id)) for t in first)
    assert changed >= 0.75 * len(first), f"only {changed} of {len(first)} variants change the reference result"
    assert sum(SPEC.check_reference(t) is None for t in first) >= 0.75 * len(first)


# every reference between the seeds' tables: (table, column) -> (table, column it names a row of)
FOREIGN_KEYS = {("orders", "customer_id"): ("customers", "id"), ("loans", "book_id"): ("books", "id"),
                ("employees", "manager_id"): ("employees", "id"), ("flights", "origin"): ("airports", "code"),
                ("flights", "destination"): ("airports", "code")}


def test_variants_hold_no_duplicate_names_nor_orphans() -> None:
    """Before: clones repeated a customer's (employee's, book's, airport's) name in most variants, a sampled name
    could land on another row's ('Wei Chen' asked about beside the seed's own Wei Chen), and a dropped customer
    (book, manager, airport) left the rows that refer to it pointing at no row. Every seed over 150 variants:
    ids and the seed's unique text columns (``variants.unique_columns``: names, titles, codes) hold each value once,
    and every foreign key names a row."""
    for k in range(150 * len(SEEDS)):
        task = candidate(k, SEEDS, {}, 7)[0]
        seed = next(s for s in SEEDS if s.id == task.meta.seed_id)
        state = task.reference.state or {}
        for table, spec in state.items():
            names = [c[0] for c in spec["columns"]]
            unique = {names[i] for i in variants.unique_columns((seed.state or {})[table])} | ({"id"} & set(names))
            for column in unique:
                values = [str(r[names.index(column)]).lower() for r in spec["rows"]]
                assert len(set(values)) == len(values), (task.meta.seed_id, k, table, column, values)
            for column in [n for n in names if n.endswith("_id") or (table, n) in FOREIGN_KEYS]:
                parent, key = FOREIGN_KEYS[(table, column)]
                held = {r[[c[0] for c in state[parent]["columns"]].index(key)] for r in state[parent]["rows"]}
                orphans = [r for r in spec["rows"] if r[names.index(column)] not in held | {None}]
                assert not orphans, (task.meta.seed_id, k, table, column, orphans)


def test_result_comparison() -> None:
    assert engine.same_result([(1, "a"), (2, None)], [(2.0000001, None), (1.0, "a")], ordered=False)
    assert not engine.same_result([(1, "a"), (2, None)], [(2, None), (1, "a")], ordered=True)
    assert not engine.same_result([(None,)], [(0,)], ordered=False)
    assert not engine.same_result([(1,), (1,)], [(1,)], ordered=False)
    assert not engine.same_result([("1",)], [(1,)], ordered=False)
    assert sql.top_level_order_by("SELECT a FROM t ORDER BY a")
    assert not sql.top_level_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a) s")
    assert not sql.top_level_order_by("SELECT row_number() OVER (ORDER BY a) FROM t")
    assert sql.statement_count("SELECT ';' AS x; -- ;\n") == 1


def test_reward_function_skips_other_envs() -> None:
    task = seed_task("hr-2")
    other = Task.model_validate({**task.model_dump(), "id": "", "env": "math"})
    good = SPEC.reference_completion(task)
    assert sql.sql_reward([good, good, "DELETE FROM employees"], [task.model_dump_json(), other, task]) == \
        [1.0, None, -1.0]


def test_eval_flags_count_unsafe_queries() -> None:
    from flywheel.tasks.evaluation.metrics import outcome

    task = seed_task("hr-2")
    unsafe = outcome("sql", sql.verify(task, "DROP TABLE employees"), 1.0)
    assert (unsafe["unsafe"], unsafe["bucket"], unsafe["execution_success"]) == (True, "unsafe_action", False)
    wrong = outcome("sql", sql.verify(task, "SELECT COUNT(*) FROM employees"), 1.0)
    assert (wrong["unsafe"], wrong["bucket"], wrong["execution_success"]) == (False, "wrong_result", True)
