"""Reward hacks a hostile probe found in the sql verifier; each attack scored 1.0 on the old code.

Grading used one held-back copy (the first whose reference result changed) that never relabeled keys, so an id read
off the shown rows (``customer_id = 1`` for "orders of <the customer in row 1>") or a memorised id list
(``o.id IN (1, 3, 5, 7, 8, 10)``) passed. Every held-back copy now relabels keys; legitimate queries keep full reward.
"""

from __future__ import annotations

from functools import cache

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.generate import candidate
from flywheel.tasks.data.seeds import env_paths, load_seeds, seed_task
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.sql import engine, literals, sql, variants
from flywheel.verifiers.render import format_value

SQL = get_env("sql")
VARIANTS = 20  # generated tasks per seed
# the column whose ids the memorised-list hack writes (None: the constant `customer_id = 1` hack)
ID_COLUMN = {"sales-1": None, "sales-2": "id", "sales-3": "o.id", "hr-1": "id", "hr-2": "id", "lib-2": "id"}
# variants of these seeds where the memorised list may pass by chance: its ids, relabeled at random, hit only the
# result's rows on the copies whose result is not empty (sales-3: 2 of 100 variants with sql 1.3's variants, 3 of
# 100 with 1.4's, whose dropped customers take their orders along; 0 of 100 with 1.5's and with 1.6's, whose
# relabeled ids spread over 1..10*(ids): the one tolerated is kept for a change of draws)
LUCKY = {"sales-3": 1}
# legitimate queries other than the reference, by seed: they must keep scoring 1.0 on every held-back copy
LEGIT = {
    "sales-1": "SELECT count(1) FROM orders WHERE customer_id IN (SELECT id FROM customers WHERE name = '{customer}')",
    "sales-3": "SELECT DISTINCT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id "
               "AND o.amount > {price}) ORDER BY name DESC",
    "sales-4": "SELECT id AS order_id, amount AS total FROM orders ORDER BY amount DESC, id LIMIT {limit}",
    "hr-1": "SELECT SUM(salary) * 1.0 / COUNT(*) FROM employees WHERE lower(team) = lower('{team}')",
    "hr-5": "SELECT name FROM employees WHERE manager_id IN (SELECT id FROM employees WHERE name = '{boss}')",
    "lib-2": "SELECT title FROM books WHERE year + {count} < 2026",
    "lib-6": "SELECT b.title, l.loan_date FROM books b, loans l WHERE l.book_id = b.id AND l.member = '{member}'",
    "fl-4": "SELECT DISTINCT city FROM airports WHERE code IN (SELECT destination FROM flights WHERE airline = "
            "'{airline}')",
}


# "look the id up by name, then filter on it" and LEFT JOIN forms, by seed: (query, table and column of the name
# the question gives, or None). They must score 1.0 on every variant where they are correct on the shown tables;
# a variant whose shown tables already hold the named entity twice (two customers 'Sofia Mensah': the variant
# generator cloned rows before sql 1.4) is genuinely ambiguous and left out, and so is one whose shown tables
# hold an order of a dropped customer (a variant kept such orphans before sql 1.4: the LEFT JOIN then
# returns a NULL country the reference does not)
LEGIT_LOOKUP = {
    "sales-1": [("SELECT COUNT(*) FROM orders WHERE customer_id = (SELECT id FROM customers WHERE name = "
                 "'{customer}')", ("customers", 1)),
                ("SELECT COUNT(o.id) FROM customers c LEFT JOIN orders o ON o.customer_id = c.id "
                 "WHERE c.name = '{customer}'", ("customers", 1))],
    "hr-5": [("SELECT name FROM employees WHERE manager_id = (SELECT id FROM employees WHERE name = '{boss}')",
              ("employees", 1))],
    "sales-6": [("SELECT c.country, SUM(o.amount) FROM orders o LEFT JOIN customers c ON o.customer_id = c.id "
                 "GROUP BY c.country", None)],
    "lib-6": [("SELECT b.title, l.loan_date FROM loans l LEFT JOIN books b ON b.id = l.book_id "
               "WHERE l.member = '{member}'", None)],
}


@cache
def _seeds() -> tuple:
    return tuple(load_seeds(env_paths("sql")[0], {}))


@cache
def generated(seed_id: str) -> tuple[tuple[Task, dict], ...]:
    """VARIANTS generated tasks of the seed that generation keeps (their reference can grade)."""
    seeds, found = _seeds(), []
    for k in range(len(seeds) * 3 * VARIANTS):
        task, values = candidate(k, seeds, {}, run_seed=7)
        if task.meta.seed_id == seed_id and SQL.reference_problem(task) is None:
            found.append((task, values))
        if len(found) == VARIANTS:
            break
    return tuple(found)


def id_hack(task: Task) -> str:
    """The attack on ``task``: the constant id, or the ids of the rows the reference selects, memorised."""
    ref, column = task.reference.answer or "", ID_COLUMN[task.meta.seed_id]
    if column is None:
        return "SELECT COUNT(*) FROM orders WHERE customer_id = 1"
    conn = engine.build(task.reference.state or {})
    ids = [row[0] for row in conn.execute(f"SELECT {column} " + ref[ref.index(" FROM "):])]
    return ref[:ref.index(" WHERE ")] + f" WHERE {column} IN ({', '.join(map(str, ids))})"


@pytest.mark.parametrize("seed_id", sorted(ID_COLUMN))
def test_hard_coded_ids_fail_on_generated_variants_while_the_reference_passes(seed_id: str) -> None:
    tasks = generated(seed_id)
    assert len(tasks) == VARIANTS
    for task, _ in tasks:
        assert sql.verify(task, SQL.reference_completion(task)).reward == 1.0, task.id
    hacked = [(task.id, sql.verify(task, id_hack(task))) for task, _ in tasks]
    passed = [(tid, v.details) for tid, v in hacked if v.reward != 0.0]
    assert len(passed) <= LUCKY.get(seed_id, 0), \
        f"{len(passed)} of {len(tasks)} {seed_id} variants reward the hack {id_hack(tasks[0][0])!r}"
    assert {v.failure_class for _, v in hacked if v.reward == 0.0} <= {"hardcoded_result", "wrong_result"}


@pytest.mark.parametrize(("seed_id", "hack"), [
    ("sales-1", "SELECT COUNT(*) FROM orders WHERE customer_id = 1"),
    ("sales-1", "SELECT COUNT(*) FROM orders WHERE customer_id = (SELECT MIN(id) FROM customers)"),
    ("sales-3", "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
                "WHERE o.id IN (1, 3, 5, 7, 8, 10)"),
    ("sales-2", "SELECT SUM(amount) FROM orders WHERE id IN (1, 5, 8)"),
    ("hr-1", "SELECT AVG(salary) FROM employees WHERE id IN (1, 2, 3)"),
])
def test_hard_coded_ids_fail_on_the_seed_tables_under_many_task_ids(seed_id: str, hack: str) -> None:
    """The probe's form: the seed's own tables (which the hack was read off) under 30 task ids. `customer_id =
    (SELECT MIN(id) ...)` passes when the customer named gets the smallest relabeled id on every copy by chance:
    1 of 300 task ids with sql 1.5 and with 1.6 (one of these 30 with 1.6's draws): at most one is tolerated."""
    seed = next(s for s in _seeds() if s.id == seed_id)
    base = seed_task(seed, {}).model_dump()
    lucky = []
    for n in range(30):
        base["messages"][-1]["content"] += " "  # another task id, the same tables
        task = Task.model_validate({**base, "id": ""})
        assert sql.verify(task, SQL.reference_completion(task)).reward == 1.0
        verdict = sql.verify(task, hack)
        if verdict.reward != 0.0 and "MIN(id)" in hack:
            lucky.append(n)
            continue
        assert (verdict.reward, verdict.failure_class) == (0.0, "hardcoded_result"), (n, verdict.details)
    assert len(lucky) <= 1, lucky


def test_a_count_of_fixed_ids_now_grades_and_fails_its_literal() -> None:
    """sql 1.2 could not grade `COUNT(*) ... WHERE id <= 3` (no copy changed it: static_reference_result); the
    copies now drop or clone a row it counts, so the literal 3 fails and the query (or an equivalent) passes."""
    seed = next(s for s in _seeds() if s.id == "sales-1")
    base = seed_task(seed, {}).model_dump()
    reference = {**base["reference"], "answer": "SELECT COUNT(*) FROM customers WHERE id <= 3"}
    task = Task.model_validate({**base, "id": "", "reference": reference})
    assert SQL.reference_problem(task) is None
    assert sql.verify(task, "SELECT 3 FROM customers LIMIT 1").failure_class == "hardcoded_result"
    assert sql.verify(task, "SELECT COUNT(*) FROM customers WHERE id < 4").reward == 1.0


@pytest.mark.parametrize("seed_id", sorted(LEGIT))
def test_legitimate_queries_keep_full_reward_on_every_held_back_copy(seed_id: str) -> None:
    """Joins on relabeled keys, filters by names and values, ORDER BY, self-joins: still 1.0 on every variant."""
    for task, values in generated(seed_id):
        query = LEGIT[seed_id].format(**{k: format_value(v) for k, v in values.items()})
        verdict = sql.verify(task, f"```sql\n{query}\n```")
        assert verdict.reward == 1.0, (task.id, verdict.failure_class, verdict.details)


@pytest.mark.parametrize(("seed_id", "n"), [(k, n) for k, forms in sorted(LEGIT_LOOKUP.items())
                                             for n in range(len(forms))])
def test_lookups_by_name_and_left_joins_keep_full_reward_on_every_held_back_copy(seed_id: str, n: int) -> None:
    """sql 1.3.0 as first written cloned the named customer (or boss) into a copy, so `customer_id = (SELECT id
    FROM customers WHERE name = ...)` passed 19 of 49 sales-1 variants, and dropped customers but not their orders,
    so a LEFT JOIN met orphans (sales-6 1 of 60, lib-6 5 of 57)."""
    query, named = LEGIT_LOOKUP[seed_id][n]
    checked = 0
    for task, values in generated(seed_id):
        state = task.reference.state or {}
        filled = query.format(**{k: format_value(v) for k, v in values.items()})
        conn = engine.build(state)
        shown = engine.run_query(conn, filled, set(state))[0]
        wanted = engine.run_query(conn, task.reference.answer or "", set(state))[0]
        if named and sum(str(r[named[1]]).lower() in literals.string_literals(filled)
                         for r in state[named[0]]["rows"]) > 1:
            continue  # the shown tables name two entities alike: ambiguous before any copy
        if not engine.same_result(shown, wanted, sql.top_level_order_by(task.reference.answer or "")):
            continue  # wrong on the shown tables already (a variant's orphan rows)
        checked += 1
        verdict = sql.verify(task, f"```sql\n{filled}\n```")
        assert verdict.reward == 1.0, (task.id, verdict.failure_class, verdict.details)
    assert checked >= 5, checked


def test_a_copy_never_clones_the_named_entity_and_drops_the_rows_of_a_dropped_parent() -> None:
    seed = next(s for s in _seeds() if s.id == "sales-1")
    state = seed_task(seed, {}).model_dump()["reference"]["state"]
    name = state["customers"]["rows"][0][1]
    keep = {name.lower()}
    assert variants.protected(state, keep) == {("customers", 0)}
    everyone = [("customers", i) for i in range(len(state["customers"]["rows"]))]
    for attempt in range(40):
        copy = variants.held_back(state, f"t{attempt}", keep, attempt, everyone, set())
        assert sum(r[1] == name for r in copy["customers"]["rows"]) <= 1
        ids = {r[0] for r in copy["customers"]["rows"]}
        assert all(r[1] in ids for r in copy["orders"]["rows"])  # no order of a dropped customer
    assert variants.referrers(state, "customers") == [("orders", 1)]


@pytest.mark.parametrize("base", [20240101, 10**15])
def test_large_ids_relabel_without_a_list_sized_by_the_largest_id(base: int) -> None:
    """A pool of range(1, 3 * (max(id) + n)) took 2.3 GB for ids near 20240101 (valid=False past the 1 GiB bound)."""
    state = {"customers": {"columns": [["id", "INTEGER"], ["name", "TEXT"]],
                           "rows": [[base + i, f"C{i}"] for i in range(6)]},
             "orders": {"columns": [["id", "INTEGER"], ["customer_id", "INTEGER"], ["amount", "REAL"]],
                        "rows": [[i, base + i % 6, 10.0 * i] for i in range(1, 11)]}}
    join = "SELECT c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.amount"
    for n in range(5):
        copy = variants.relabeled(state, variants._rng("big", n), {base + 1, 3})
        got = engine.run_query(engine.build(copy), join, set(copy))[0]
        assert got == engine.run_query(engine.build(state), join, set(state))[0]
        assert [base + 1, "C1"] in copy["customers"]["rows"] and [3, base + 3, 30.0] not in copy["orders"]["rows"]
        assert len({r[0] for r in copy["customers"]["rows"]} | {r[0] for r in copy["orders"]["rows"]}) == 16
    ref = "SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = 'C2'"
    task = Task.model_validate({"env": "sql", "messages": [{"role": "user", "content": f"orders of C2 ({base})"}],
                                "reference": {"answer": ref, "state": state}, "meta": {"seed_id": "probe"}})
    assert sql.verify(task, SQL.reference_completion(task)).reward == 1.0
    assert sql.verify(task, f"SELECT COUNT(*) FROM orders WHERE customer_id = {base + 2}").failure_class == \
        "hardcoded_result"


def test_the_probed_rows_are_capped_and_reach_every_table() -> None:
    """sql 1.3.0 as first written probed the first 200 rows in table order (never an order past 200 customers),
    rebuilding every table per probe (a correlated reference: 5.8 s CPU, past the reference's bound)."""
    state = {"customers": {"columns": [["id", "INTEGER"], ["name", "TEXT"]],
                           "rows": [[i, f"C{i}"] for i in range(1, 301)]},
             "orders": {"columns": [["id", "INTEGER"], ["customer_id", "INTEGER"], ["amount", "REAL"]],
                        "rows": [[i, 1 + i % 300, 1.0 * i] for i in range(1, 3001)]}}
    probes = sql.probed_rows(state, "t")
    assert len(probes) == sql.MAX_PROBED_ROWS and {t for t, _ in probes} == {"customers", "orders"}
    assert probes == sql.probed_rows(state, "t") != sql.probed_rows(state, "u")
    ref = "SELECT COUNT(*) FROM orders WHERE amount > 2990"
    selected = sql.selected_rows(state, ref, [(10,)], False, "t")
    assert selected == [p for p in probes if p[0] == "orders" and p[1] >= 2990]
    small = {"t": {"columns": [["id", "INTEGER"], ["x", "INTEGER"]], "rows": [[1, 5], [2, 7], [3, 9]]}}
    assert sql.selected_rows(small, "SELECT SUM(x) FROM t WHERE x > 6", [(16,)], False) == [("t", 1), ("t", 2)]


def test_relabeled_keys_keep_every_join_and_the_ids_the_reference_writes() -> None:
    seed = next(s for s in _seeds() if s.id == "sales-1")
    task = seed_task(seed, {})
    state = task.reference.state or {}
    join = "SELECT c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.amount"

    def run(tables: dict, query: str) -> list:
        return engine.run_query(engine.build(tables), query, set(tables))[0]

    for n in range(10):
        copy = variants.relabeled(state, variants._rng("test", n), {3})
        assert run(copy, join) == run(state, join)  # one map for primary and foreign keys
        assert run(copy, "SELECT name FROM customers WHERE id = 3") == [("Sofia Rossi",)]  # a written id is kept
        ids = "SELECT id FROM customers ORDER BY name"
        assert run(copy, ids) != run(state, ids)
    ref = "SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = 'Maria Lopez'"
    copies = [variants.held_back(state, task.id, {"maria lopez"}, a, [("orders", 0)], literals.id_literals(ref))
              for a in range(sql.PERTURB_ATTEMPTS)]
    assert copies == [variants.held_back(state, task.id, {"maria lopez"}, a, [("orders", 0)], set())
                      for a in range(sql.PERTURB_ATTEMPTS)]  # a pure function of the task


@pytest.mark.parametrize(("query", "ids"), [
    ("SELECT a FROM t WHERE id = 3 AND x = '7' AND y > 2.5 LIMIT 10", {3}),
    ("SELECT * FROM orders o WHERE o.customer_id=5 OR 6 = \"id\" OR o.id IN (7, 8,9) OR id NOT BETWEEN 11 AND 12 "
     "ORDER BY 2 LIMIT 13 OFFSET 14", {5, 6, 7, 8, 9, 11, 12}),
    ("SELECT team FROM employees GROUP BY team HAVING COUNT(*) > 2 AND MAX(salary) > 3", set()),
    ("SELECT COUNT(*) FROM items WHERE quantity > 3 AND book_id <= 4 AND year = 2005 AND note = 'id = 5'", {4}),
])
def test_only_integers_compared_with_an_id_column_stay_fixed(query: str, ids: set[int]) -> None:
    """sql 1.3 fixed every integer the reference writes (LIMIT 10 kept id 10 unrelabeled in every copy)."""
    assert literals.id_literals(query) == ids


@pytest.mark.parametrize("tail", [" LIMIT 1", " AND o.amount > 1", " GROUP BY c.id HAVING COUNT(*) >= 1"])
def test_a_count_in_the_reference_does_not_pin_the_id_a_hack_writes(tail: str) -> None:
    """sql 1.3 kept every integer the reference writes as an id: `LIMIT 1` (or `amount > 1`, `COUNT(*) >= 1`)
    kept id 1, the named customer's, in every copy, so `customer_id = 1` read off the shown rows passed them all."""
    seed = next(s for s in _seeds() if s.id == "sales-1")
    base = seed_task(seed, {}).model_dump()
    reference = {**base["reference"], "answer": base["reference"]["answer"] + tail}
    for n in range(10):
        base["messages"][-1]["content"] += " "  # another task id, the same tables
        task = Task.model_validate({**base, "id": "", "reference": reference})
        assert sql.verify(task, SQL.reference_completion(task)).reward == 1.0
        verdict = sql.verify(task, "SELECT COUNT(*) FROM orders WHERE customer_id = 1")
        assert (verdict.reward, verdict.failure_class) == (0.0, "hardcoded_result"), (n, verdict.details)


def test_a_held_back_copy_finds_its_protected_rows_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """sql 1.3 ran ``protected`` twice per copy (in held_back and again in perturbed)."""
    seed = next(s for s in _seeds() if s.id == "sales-1")
    state = seed_task(seed, {}).reference.state or {}
    calls = []
    real = variants.protected
    monkeypatch.setattr(variants, "protected", lambda *args: calls.append(args) or real(*args))
    variants.held_back(state, "t", {"maria lopez"}, 1, [("orders", 0)], set())
    assert len(calls) == 1
