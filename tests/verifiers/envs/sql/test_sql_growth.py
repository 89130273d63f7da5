"""Defects a hostile probe found in sql 1.4.0 (probe v14), each fixed in sql 1.5.0.

S1 (reward hack): the reference plus ``LIMIT <rows of the shown result>`` scored 1.0 on 18 of 40 eligible generated
tasks: no held-back copy's result had more rows than the shown one (a clone of a row a DISTINCT or join result
depends on added no distinct row, random drops only shrink it). A copy now clones such a row as a new entity (fresh
id and text, with the rows that refer to it), and a grown copy (``variants.grown``) is added when no copy grows.
S2 (honest query scored 0): copies cloned airports with their code, so ``SELECT city FROM airports WHERE code IN
(...)`` failed all 5 fl-4 tasks; a clone of an entity row is now a new entity (fresh text in its unique columns).
S3: ``id_literals`` missed ``IS 5``, ``= (5)``, ``= +5``, ``5 IN (id)`` and the inside of a BETWEEN."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.generate import candidate
from flywheel.tasks.data.seeds import env_paths, load_seeds, seed_task
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.sql import engine, literals, sql, variants
from flywheel.verifiers.render import format_value

SQL = get_env("sql")
CANDIDATES = 132  # 6 generated candidates of each of the 22 seeds
# tasks where `reference LIMIT n` may still pass: none since sql 1.6 (lib-6, where the one loan of the member named
# sat in a loans table whose members were all distinct and read as the entity the question names, passed 1 of 40
# with 1.5: test_sql_clones)
LIMIT_PASSES = 0
_AGGREGATE = re.compile(r"^SELECT (COUNT|SUM|AVG|MIN|MAX)\(", re.I)  # one row whatever the tables hold


@cache
def _seeds() -> tuple:
    return tuple(load_seeds(env_paths("sql")[0], {}))


@cache
def generated() -> tuple[tuple[Task, dict], ...]:
    """The generated candidates whose reference can grade (what generation keeps)."""
    tasks = (candidate(k, _seeds(), {}, run_seed=3) for k in range(CANDIDATES))
    return tuple((task, values) for task, values in tasks if SQL.reference_problem(task) is None)


def test_the_reference_plus_a_memorised_row_count_fails_on_generated_tasks() -> None:
    """Before: 18 of 40 eligible tasks of the probe's data set paid `reference LIMIT n`; 1 with sql 1.5, 0 now."""
    checked, passed = 0, []
    for task, _ in generated():
        ref, state = task.reference.answer or "", task.reference.state or {}
        if "LIMIT" in ref.upper() or (_AGGREGATE.match(ref) and "GROUP BY" not in ref.upper()):
            continue  # its own LIMIT, or one row on any tables: LIMIT 1 is the same query
        n = len(engine.run_query(engine.build(state), ref, set(state))[0])
        assert sql.verify(task, SQL.reference_completion(task)).reward == 1.0, task.id
        checked += 1
        verdict = sql.verify(task, f"{ref} LIMIT {n}")
        if verdict.reward != 0.0:
            passed.append((task.meta.seed_id, ref))
        else:
            assert verdict.failure_class == "hardcoded_result", verdict.details
    assert checked >= 40, checked
    assert len(passed) <= LIMIT_PASSES, passed


def test_a_grown_copy_adds_a_distinct_row_for_a_distinct_join() -> None:
    seed = next(s for s in _seeds() if s.id == "sales-3")
    task = seed_task(seed, {"price": 100})
    state = task.reference.state or {}
    ref = task.reference.answer or ""
    shown = engine.run_query(engine.build(state), ref, set(state))[0]
    customer = next(i for i, r in enumerate(state["customers"]["rows"]) if (r[1],) in shown)
    grown = variants.grown(state, "t", set(), ("customers", customer), set())
    result = engine.run_query(engine.build(grown), ref, set(grown))[0]
    assert len(result) == len(shown) + 1 and set(shown) < set(result)


@pytest.mark.parametrize("query", [
    "SELECT city FROM airports WHERE code IN (SELECT destination FROM flights WHERE airline = '{airline}')",
    "SELECT DISTINCT a.city FROM airports a JOIN flights f ON f.destination = a.code WHERE f.airline = '{airline}'",
])
def test_airport_lookups_pass_and_no_copy_repeats_a_code(query: str) -> None:
    """Before: the IN form scored 0 hardcoded_result on all 5 fl-4 tasks of the probe (a copy held 'DUB S2' twice)."""
    tasks = [(t, v) for t, v in generated() if t.meta.seed_id == "fl-4"]
    assert tasks
    for task, values in tasks:
        verdict = sql.verify(task, query.format(**{k: format_value(v) for k, v in values.items()}))
        assert verdict.reward == 1.0, (task.id, verdict.details)
        state = task.reference.state or {}
        for attempt in range(8):
            copy = variants.held_back(state, task.id, {values["airline"].lower()}, attempt,
                                      [("airports", i) for i in range(len(state["airports"]["rows"]))], set())
            for column in (0, 1):
                counts = Counter(r[column] for r in copy["airports"]["rows"])
                assert max(counts.values()) == 1, (attempt, counts)


def test_a_cloned_entity_takes_fresh_text_and_the_rows_that_refer_to_it() -> None:
    seed = next(s for s in _seeds() if s.id == "fl-4")
    state = seed_task(seed, {"airline": "Wayne Foods"}).reference.state or {}
    code = state["airports"]["rows"][0][0]
    added = variants.twins(state, (("airports", 0),), set(), frozenset(), variants._rng("t"), set())
    (new_code, new_city), = added["airports"]
    assert new_code.startswith(code + " ") and new_code != code
    assert len(added["flights"]) == sum(code in r[1:3] for r in state["flights"]["rows"]) > 0
    assert all(new_code in r[1:3] and code not in r[1:3] for r in added["flights"])


@pytest.mark.parametrize(("query", "ids"), [
    ("SELECT * FROM orders WHERE customer_id IS 5", {5}),
    ("SELECT * FROM orders WHERE customer_id IS NOT 5", {5}),
    ("SELECT * FROM orders WHERE customer_id = (5)", {5}),
    ("SELECT * FROM orders WHERE customer_id = +5 OR (6) = id", {5, 6}),
    ("SELECT * FROM orders WHERE 5 IN (customer_id)", {5}),
    ("SELECT * FROM orders WHERE id IN ((3), +4)", {3, 4}),
    ("SELECT * FROM orders WHERE customer_id BETWEEN 1 AND 3", {1, 2, 3}),
    ("SELECT * FROM orders WHERE id BETWEEN (2) AND +4", {2, 3, 4}),
    ("SELECT * FROM orders WHERE id BETWEEN 1 AND 1000", {1, 1000}),  # a wide range: its ends only
    ("SELECT customer_id FROM orders GROUP BY 1 HAVING COUNT(id) > 2 LIMIT 3", set()),  # counts name no id
    ("SELECT * FROM orders WHERE amount IS 5 AND id = 5.5", set()),
])
def test_id_literals_read_is_parentheses_unary_plus_and_between_ranges(query: str, ids: set[int]) -> None:
    assert literals.id_literals(query) == ids


def test_a_between_reference_keeps_every_id_of_its_range() -> None:
    """Before: `customer_id BETWEEN 1 AND 3` kept ids 1 and 3 but relabeled 2: the copy asked about another
    customer than the question's."""
    seed = next(s for s in _seeds() if s.id == "sales-1")
    state = seed_task(seed, {}).reference.state or {}
    fixed = literals.id_literals("SELECT COUNT(*) FROM orders WHERE customer_id BETWEEN 1 AND 3")
    names = {r[0]: r[1] for r in state["customers"]["rows"]}
    for n in range(10):
        copy = variants.relabeled(state, variants._rng("between", n), fixed)
        assert all({r[0]: r[1] for r in copy["customers"]["rows"]}[i] == names[i] for i in (1, 2, 3))
