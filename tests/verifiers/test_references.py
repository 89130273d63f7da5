"""Attacks on the sql and math verifiers through their references and their parsers: a reward that a literal
answer earned because the reference could not tell (forgery), a task's own fault charged to the completion
(valid=True where the verifier could not score), a result that changes with the day, and patterns that stalled the
caller before the bounded worker was reached. Each case failed on the old code."""

from __future__ import annotations

import json

import pytest

from conftest import within
from flywheel.schemas import SeedTask, Task, TaskMeta
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.math import math as math_verifier
from flywheel.verifiers.envs.sql import sql

SQL = get_env("sql")


def sales_tables() -> dict:
    seed = next(SeedTask.model_validate({**json.loads(line), "env": "sql"})
                for line in SQL.seeds_path.read_text(encoding="utf-8").splitlines() if '"sales-1"' in line)
    request = seed.templates[0].format(**seed.values)
    return SQL.render(seed, {}, request, seed.values, TaskMeta(seed_id=seed.id)).reference.state


def sql_task(answer: str) -> Task:
    return Task.model_validate({"env": "sql", "messages": [{"role": "user", "content": "q?"}],
                                "reference": {"answer": answer, "state": sales_tables()}, "meta": {"seed_id": "x"}})


def math_task(answer: str) -> Task:
    return Task.model_validate({"env": "math", "messages": [{"role": "user", "content": "q?"}],
                                "reference": {"answer": answer}, "meta": {"seed_id": "x"}})


@pytest.mark.parametrize(("reference", "literal", "kind"), [
    # no held-back copy changes the result: SELECT 1 matches them all (was `COUNT(*) ... WHERE id <= 3`, which the
    # held-back copies of sql 1.3 change: they drop and clone the rows it counts and relabel ids)
    ("SELECT COUNT(*) > 0 FROM customers", "SELECT 1 FROM customers LIMIT 1", "static_reference_result"),
    ("SELECT name FROM customers WHERE country = 'Atlantis'", "SELECT id FROM orders WHERE 0",
     "empty_reference_result"),
    ("SELECT SUM(amount) FROM orders WHERE currency = 'JPY'", "SELECT NULL FROM orders LIMIT 1",
     "empty_reference_result"),
])
def test_a_reference_that_cannot_tell_a_literal_answer_is_not_scored_and_not_generated(reference, literal,
                                                                                        kind) -> None:
    task = sql_task(reference)
    verdict = sql.verify(task, literal)
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (False, None, "verifier_error"), verdict
    assert SQL.reference_problem(task)[0] == kind


def test_a_held_back_copy_that_only_reorders_rows_does_not_pass_a_literal_answer() -> None:
    """The search for a changed copy compared in order; grading (no ORDER BY) compares unordered."""
    literal = "SELECT 1 FROM customers WHERE id = 1 UNION ALL SELECT 2 FROM customers WHERE id = 1 UNION ALL " \
              "SELECT 3 FROM customers WHERE id = 1"
    verdict = sql.verify(sql_task("SELECT id FROM customers WHERE id IN (1, 2, 3)"), literal)
    assert verdict.reward != 1.0, verdict


def test_a_slow_reference_is_the_tasks_fault_not_the_completions() -> None:
    reference = "SELECT COUNT(*) FROM orders WHERE printf('%.*c', 2000000000, 'x') IS NULL AND currency = 'EUR'"
    task = sql_task(reference)
    for completion in (f"```sql\n{reference}\n```", "SELECT COUNT(*) FROM orders WHERE currency = 'EUR'"):
        verdict = within(60, lambda c=completion: sql.verify(task, c))
        assert (verdict.valid, verdict.failure_class) == (False, "verifier_error"), verdict
        assert "crosses the verifier's bound" in verdict.details


@pytest.mark.parametrize("clock", ["date('now')", "strftime('%s', 'NOW ')", "CURRENT_DATE", "current_timestamp"])
def test_a_query_that_reads_the_clock_is_refused(clock) -> None:
    """Before: `... AND date('now') < '2026-12-01'` scored 1.0 until that day and 0.0 after it."""
    query = f"SELECT COUNT(*) FROM orders WHERE currency = 'EUR' AND {clock} IS NOT NULL"
    verdict = sql.verify(sql_task("SELECT COUNT(*) FROM orders WHERE currency = 'EUR'"), query)
    assert (verdict.reward, verdict.failure_class) == (0.0, "runtime_error") and "current date" in verdict.details
    assert sql.verify(sql_task("SELECT COUNT(*) FROM orders WHERE currency = 'EUR'"),
                      "SELECT COUNT(*) FROM orders WHERE currency = 'EUR' AND 'now or never' <> ''").reward == 1.0


@pytest.mark.parametrize(("reference", "answer", "why"), [
    ("\\binom{5}{2}", "\\boxed{10}", "cannot be read"),
    ("factorial(5)", "\\boxed{120}", "cannot be read"),
    ("10^301", "\\boxed{10^{301}}", "cannot be read"),
    ("exp(exp(exp(100)))", "\\boxed{3.14159265358979}", "crosses the verifier's bound"),
])
def test_a_math_reference_the_verifier_cannot_read_is_verifier_error_not_wrong_answer(reference, answer,
                                                                                       why) -> None:
    verdict = within(60, lambda: math_verifier.verify(math_task(reference), answer))
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (False, None, "verifier_error"), verdict
    assert why in verdict.details


@pytest.mark.parametrize(("reference", "answer", "reward"), [
    ("12345678", "\\boxed{12345670}", 0.0), ("1000000007", "\\boxed{1000000000}", 0.0),
    ("1/3", "\\boxed{2/6}", 1.0), ("1/2", "\\boxed{0.5}", 1.0), ("oo", "\\boxed{\\infty}", 1.0),
    ("oo", "\\boxed{-oo}", 0.0), ("x", "\\boxed{x + 0/0}", 0.0), ("x", "\\boxed{x + 0*oo}", 0.0),
    ("x", "\\boxed{2*x/2}", 1.0),
])
def test_exact_numbers_must_be_equal_not_merely_close_and_undefined_terms_never_cancel(reference, answer,
                                                                                       reward) -> None:
    assert math_verifier.verify(math_task(reference), answer).reward == reward


@pytest.mark.parametrize(("verify", "task", "completion", "failure"), [
    (math_verifier.verify, lambda: math_task("42"), "\n" * 200_000, "no_answer"),
    (sql.verify, lambda: sql_task("SELECT COUNT(*) FROM orders"), "```" + " " * 200_000, "too_large"),
])
def test_a_completion_cannot_stall_the_caller_before_the_bounded_worker(verify, task, completion, failure) -> None:
    """Before: the answer-line and fence patterns were quadratic: 40,000 newlines took 22 s in the caller."""
    verdict = within(10, lambda: verify(task(), completion))
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (True, 0.0, failure), verdict
