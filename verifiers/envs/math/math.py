"""The math verifier: the final answer (``answers``) compared with the reference (``equivalence``) in a bounded
worker, the reference checked once in its own bounded call. Reward 1.0 when equivalent, else 0.0; failure classes
``no_answer``, ``ambiguous_answer``, ``wrong_answer``, ``timeout``, ``too_large`` and ``verifier_error``. The full
contract (answer forms, percent readings, exactness, bounds) is in this env's README.md."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from flywheel.schemas import Task, Verdict
from flywheel.verifiers import bounds
from flywheel.verifiers.common import batch_rewards, guarded_verify
from flywheel.verifiers.envs.math.answers import extract_answers, final_sentence  # noqa: F401 - re-exported
from flywheel.verifiers.envs.math.equivalence import (  # noqa: F401 - re-exported
    NAMES,
    REL_TOL,
    compare,
    equivalent,
    read_reference,
    to_expr,
)

NAME = "math"
VERSION = "1.5.0"  # history: CHANGELOG.md
# 2 CPU seconds is 10x the slowest golden case; the wall bound only backs it up on a loaded machine.
LIMITS = bounds.Limits(cpu_s=2, wall_s=8.0, memory_bytes=2 << 30, warm=("flywheel.verifiers.envs.math.math",))


@lru_cache(maxsize=4096)
def _readable_reference(reference: str) -> None:
    """read_reference in its own bounded call, once per reference: an unreadable reference, or one that crosses the
    CPU or memory bound, is the task's fault (ValueError: verifier_error), never the completion's. lru_cache keeps
    no exception, so such a task is tried again each time, and so is a wall bound (_LoadDependent: the load's)."""
    try:
        bounds.run(read_reference, reference, limits=LIMITS)
    except bounds.BoundExceeded as err:
        if err.kind == "wall":
            raise _LoadDependent(err.with_traceback(None)) from None
        raise ValueError(f"the reference answer {reference[:80]!r} crosses the verifier's bound ({err})") from None
    except bounds.WorkerError as err:
        raise ValueError(f"the reference answer {reference[:80]!r} cannot be read ({err}): fix the task") from None


def _bounded_compare(answers: tuple[str, ...], reference: str) -> tuple[bool, bool] | bounds.BoundExceeded:
    try:
        return bounds.run(compare, list(answers), reference, limits=LIMITS)
    except bounds.BoundExceeded as err:
        return err.with_traceback(None)  # remembered: keep no frames alive


class _LoadDependent(Exception):
    """A wall-clock bound crossed: it depends on the machine's load, so it is not remembered (lru_cache keeps no
    exception)."""

    def __init__(self, bound: bounds.BoundExceeded) -> None:
        super().__init__(str(bound))
        self.bound = bound


@lru_cache(maxsize=65536)
def _cacheable_compare(answers: tuple[str, ...], reference: str) -> tuple[bool, bool] | bounds.BoundExceeded:
    outcome = _bounded_compare(answers, reference)
    if isinstance(outcome, bounds.BoundExceeded) and outcome.kind == "wall":
        raise _LoadDependent(outcome)
    return outcome


def _cached_compare(answers: tuple[str, ...], reference: str) -> tuple[bool, bool] | bounds.BoundExceeded:
    """compare() is pure, so its load-independent outcomes (results, CPU and memory bounds) are remembered: a GRPO
    group repeating one slow answer pays the bound once, and repeated answers skip the round trip to the worker.
    A wall-clock bound is tried again next time: one busy moment must not fix the verdict for the process."""
    try:
        return _cacheable_compare(answers, reference)
    except _LoadDependent as err:
        return err.bound


def _verdict(**fields: Any) -> Verdict:
    return Verdict(verifier=NAME, verifier_version=VERSION, **fields)


def _score(task: Task, completion: str) -> Verdict:
    reference = task.reference.answer
    if not reference:
        raise ValueError("math task has no reference answer (reference.answer)")
    answers = extract_answers(completion)
    if not answers:
        return _verdict(reward=0.0, valid=True, failure_class="no_answer",
                        details="no \\boxed{}, no 'Answer:' line and no answer in the last sentence")
    key = tuple(answers)
    try:
        _readable_reference(reference)
        outcome = (_cached_compare if sum(map(len, key)) <= 4096 else _bounded_compare)(key, reference)
    except _LoadDependent as err:  # a machine too busy to read even the reference: a timeout, as for the answer
        outcome = err.bound
    if isinstance(outcome, bounds.BoundExceeded):
        memory = outcome.kind == "memory"  # CPU or wall: one message, so the verdict does not depend on the load
        bound = f"the {LIMITS.memory_bytes >> 20} MiB memory bound" if memory else \
            f"the time bound ({LIMITS.cpu_s} s CPU, {LIMITS.wall_s:g} s wall)"
        return _verdict(reward=0.0, valid=True, failure_class="too_large" if memory else "timeout",
                        components={"correct": 0.0}, details=f"answer {answers[-1][:80]!r}: exceeded {bound}")
    consistent, correct = outcome
    if not consistent:
        return _verdict(reward=0.0, valid=True, failure_class="ambiguous_answer",
                        details=f"{len(answers)} boxed answers that differ")
    return _verdict(reward=float(correct), valid=True, failure_class=None if correct else "wrong_answer",
                    components={"correct": float(correct)}, details=f"answer {answers[-1][:80]!r}")


def verify(task: Task, completion: str) -> Verdict:
    """Score one solution; a verifier crash becomes valid=False data, never reward 0."""
    return guarded_verify(NAME, VERSION, _score, task, completion)


def math_reward(completions: list[Any], task: list[Any], **kw: Any) -> list[float | None]:
    """TRL reward function (``task`` column); rows of other envs give None."""
    return batch_rewards(NAME, verify, completions, task, **kw)
