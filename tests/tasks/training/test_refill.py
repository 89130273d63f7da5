"""Online difficulty filtering (tasks/training/rollout.py: Refill): a GRPO group whose rewards are all equal is
replaced by a fresh task's group, deterministically, up to the limit; the counts per step are kept for the log."""

from __future__ import annotations

from flywheel.schemas import Message, Reference, Task, TaskMeta
from flywheel.tasks.training.rollout import Refill, has_signal


def _task(name: str) -> Task:
    return Task(env="math", messages=(Message(role="user", content=name),), reference=Reference(answer="1"),
                meta=TaskMeta(seed_id=name))


SOLVED, HARD, MIXED = _task("solved"), _task("hard"), _task("mixed")
REWARDS = {"solved": [1.0, 1.0, 1.0, 1.0], "hard": [0.0, 0.0, None, 0.0], "mixed": [1.0, 0.0, None, 1.0]}


def _generate(calls: list[tuple[list[str], int]]):
    def generate(tasks: list[Task], seed: int) -> list[list[dict]]:
        calls.append(([t.messages[0].content for t in tasks], seed))
        return [[{"reward": r} for r in REWARDS[t.messages[0].content]] for t in tasks]
    return generate


def test_flat_groups_are_replaced_by_fresh_tasks_until_they_carry_signal() -> None:
    assert not has_signal([1.0, 1.0]) and not has_signal([0.0, None]) and has_signal([0.0, None, 0.5])
    refill, calls = Refill([SOLVED, HARD, MIXED], refill=8), []
    groups = refill.run([SOLVED, MIXED, HARD], [0, 3, 0], _generate(calls))
    assert [t.messages[0].content for t, _ in groups][1] == "mixed"  # a group with signal is kept where it is
    assert all(has_signal([s["reward"] for s in samples]) for _, samples in groups)
    assert calls[0] == (["solved", "mixed", "hard"], calls[0][1]) and len({seed for _, seed in calls}) == len(calls)
    counts = refill.take()
    assert counts["groups"] == 3 and counts["groups_flat"] == 0 and counts["groups_dropped"] >= 2
    assert refill.take() == {}  # counted per step
    again, calls_again = Refill([MIXED, HARD, SOLVED], refill=8), []  # same pool in another order, same path
    assert [t.id for t, _ in again.run([SOLVED, MIXED, HARD], [0, 3, 0], _generate(calls_again))] == \
        [t.id for t, _ in groups] and calls_again == calls  # deterministic: a resumed run redraws the same tasks


def test_without_refill_or_fresh_signal_a_flat_group_is_kept_and_counted() -> None:
    calls = []
    kept = Refill([SOLVED, HARD], refill=0).run([SOLVED, HARD], [0, 1, 0], _generate(calls))
    assert [t.id for t, _ in kept] == [SOLVED.id, HARD.id] and len(calls) == 1
    only_flat = Refill([SOLVED, HARD], refill=2)
    only_flat.run([SOLVED], [0, 1, 0], _generate(calls))
    assert only_flat.take() == {"groups": 1, "groups_dropped": 2, "groups_flat": 1}
