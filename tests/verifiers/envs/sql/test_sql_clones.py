"""Defects of sql 1.5.0, each fixed in sql 1.6.0.

C1: a clone took the id just above its table's largest, so in a copy whose ids the reference fixes (``id BETWEEN 1
AND 100`` keeps every id of the range unrelabeled) ``id = <largest shown> + 1`` named the clone. Clone ids are now
drawn at random above every id of the tables and the reference's (``entities.fresh_ids``): relabeling moves them.
C2: the reference plus ``LIMIT <rows shown>`` passed the lib-6 task whose four loans each had another member: the
member column read as an entity's name, so a cloned book never took the one loan of the member named and no copy
grew the result. A table that only refers to others (``entities.is_event_table``: loans, orders) names no entity.
"""

from __future__ import annotations

import random

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.seeds import env_paths, load_seeds, seed_task
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.sql import engine, entities, literals, sql, variants

SQL = get_env("sql")
SEEDS = tuple(load_seeds(env_paths("sql")[0], {}))
# the generated lib-6 task (run seed 3) that paid `reference LIMIT 1` with sql 1.5
LIB6_STATE = {
    "books": {"columns": [["id", "INTEGER"], ["title", "TEXT"], ["author", "TEXT"], ["year", "INTEGER"],
                          ["copies", "INTEGER"]],
              "rows": [[7, "The Long Ferry", "Tomasz Lopez", 2001, 6], [4, "Paper Moons", "Leila Schmidt", 2019, 0],
                       [6, "Quiet Engines", "Ingrid Kowalski", 2021, 11], [8, "Northern Lights", "Yuki Berg", 2016, 5],
                       [3, "Salt and Iron", "Noah Murphy", 2005, 6]]},
    "loans": {"columns": [["id", "INTEGER"], ["book_id", "INTEGER"], ["member", "TEXT"], ["loan_date", "TEXT"],
                          ["returned_date", "TEXT"]],
              "rows": [[4, 6, "James Rossi", "2026-09-19", "2026-10-04"], [8, 7, "Maria Patel", "2027-04-30", None],
                       [6, 8, "Leila Okafor", "2027-01-05", None], [2, 3, "Fatima Chen", "2026-04-25", None]]}}


def _seed(seed_id: str):
    return next(s for s in SEEDS if s.id == seed_id)


def _task(seed_id: str, values: dict, state: dict | None = None, answer: str | None = None) -> Task:
    base = seed_task(_seed(seed_id), values).model_dump()
    reference = {**base["reference"], **({"state": state} if state else {}), **({"answer": answer} if answer else {})}
    return Task.model_validate({**base, "id": "", "reference": reference})


def test_fresh_ids_are_new_distinct_deterministic_and_not_the_next_id() -> None:
    taken = set(range(1, 11))
    drawn = [entities.fresh_ids(random.Random(n), set(taken), 3) for n in range(50)]
    assert drawn[7] == entities.fresh_ids(random.Random(7), set(taken), 3)
    assert all(len(set(d)) == 3 and not set(d) & taken and min(d) > 10 for d in drawn)
    assert sum(11 in d for d in drawn) <= 1 and len({tuple(d) for d in drawn}) == 50


@pytest.mark.parametrize("task_id", ["a", "b", "c"])
def test_a_clone_never_takes_the_id_past_the_largest_shown(task_id: str) -> None:
    """Before: with every id of 1..100 fixed, held-back copies held a clone with id 11 (the largest order id plus
    one), so `WHERE id = 11` named it; now every new id is drawn above the fixed ones and relabeled away."""
    state = seed_task(_seed("sales-1"), {}).reference.state or {}
    fixed = literals.id_literals("SELECT COUNT(*) FROM orders WHERE id BETWEEN 1 AND 100")
    shown = entities.id_values(state)
    selected = [("orders", i) for i in range(len(state["orders"]["rows"]))]
    for attempt in range(8):
        copy = variants.held_back(state, task_id, set(), attempt, selected, fixed)
        assert copy == variants.held_back(state, task_id, set(), attempt, selected, fixed)
        new = entities.id_values(copy) - shown
        assert new and min(new) > 100, (attempt, sorted(new))
        assert not engine.build(copy).execute("SELECT * FROM orders WHERE id = 11").fetchall()
    grown = variants.grown(state, task_id, set(), ("orders", 0), fixed)
    assert min(entities.id_values(grown) - shown) > 100


def test_a_loans_table_names_no_entity_but_a_customers_table_does() -> None:
    assert entities.is_event_table(LIB6_STATE, "loans") and not entities.is_event_table(LIB6_STATE, "books")
    sales = seed_task(_seed("sales-1"), {}).reference.state or {}
    assert entities.is_event_table(sales, "orders") and not entities.is_event_table(sales, "customers")
    hr = seed_task(_seed("hr-5"), {}).reference.state or {}
    assert not entities.is_event_table(hr, "employees")  # manager_id names no other table
    row = sales["customers"]["rows"][0]
    assert entities.names_one(sales, "customers", row, {row[1].lower()})
    assert not entities.names_one(LIB6_STATE, "loans", LIB6_STATE["loans"]["rows"][2], {"leila okafor"})


HONEST_LIB6 = [
    "SELECT b.title, l.loan_date FROM loans l JOIN books b ON b.id = l.book_id WHERE l.member = 'Leila Okafor'",
    "SELECT b.title, l.loan_date FROM loans l LEFT JOIN books b ON b.id = l.book_id WHERE l.member = 'Leila Okafor'",
    "SELECT b.title, l.loan_date FROM books b, loans l WHERE l.book_id = b.id AND l.member = 'Leila Okafor'",
    "SELECT (SELECT title FROM books WHERE id = book_id), loan_date FROM loans WHERE member = 'Leila Okafor'",
]


def test_the_reference_plus_limit_fails_the_lib6_task_whose_loans_all_have_another_member() -> None:
    """Before: `reference LIMIT 1` scored 1.0 (no copy grew the one-row result); now a cloned book takes the loan."""
    task = _task("lib-6", {"member": "Leila Okafor"}, LIB6_STATE, HONEST_LIB6[0])
    ref = task.reference.answer or ""
    assert SQL.reference_problem(task) is None
    verdict = sql.verify(task, f"{ref} LIMIT 1")
    assert (verdict.reward, verdict.failure_class) == (0.0, "hardcoded_result"), verdict.details
    for query in HONEST_LIB6:
        verdict = sql.verify(task, query)
        assert verdict.reward == 1.0, (query, verdict.details)


def test_a_copy_never_holds_two_customers_the_question_names() -> None:
    """The guard C2 narrows still holds for an entity table: a clone of an order never copies its customer."""
    task = _task("sales-1", {})
    state, ref = task.reference.state or {}, task.reference.answer or ""
    keep, fixed = literals.string_literals(ref), literals.id_literals(ref)
    selected = [("orders", i) for i in range(len(state["orders"]["rows"]))] + [("customers", 0)]
    for attempt in range(8):
        copy = variants.held_back(state, task.id, keep, attempt, selected, fixed)
        names = [r[1].lower() for r in copy["customers"]["rows"]]
        assert all(names.count(name) <= 1 for name in keep), (attempt, names)
