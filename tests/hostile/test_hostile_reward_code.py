"""Reward hacks a hostile probe found in the code env: number tolerance on expected ints (``count * 1.0000000005``
passed count-above), and seed inputs that missed whole clauses of the spec, so a wrong solution scored 1.0
(second-largest without dedupe, count-word as a substring, fizzbuzz without FizzBuzz, rotate without modulo,
count-above with >=, divisible dropping negatives, mean-round never rounding). Every buggy version below scored
1.0 on some variant the samplers draw before code 1.3; now each scores below 1.0 on every variant, and each seed's
reference still scores 1.0."""

from __future__ import annotations

import itertools
import random
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import pytest

from flywheel.schemas import SeedTask, Task, TaskMeta
from flywheel.tasks.data.samplers import sample
from flywheel.tasks.data.seeds import env_paths, load_seeds
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.code import code
from flywheel.verifiers.envs.code.code import same

# seed id -> buggy solutions ({fn} and the seed's slots are filled per variant) and, where a bug is right for
# some slot values (rotate by 2 without modulo is a correct rotation of every list), the variants to skip
BUGGY: dict[str, list[str]] = {
    "second-largest": ["def {fn}(xs):\n    s = sorted(xs)\n    return s[-2] if len(s) > 1 else None\n"],
    "count-word": ["def {fn}(text):\n    return text.lower().count('{word}')\n",
                   "def {fn}(text):\n    return int('{word}' in text.lower())\n",
                   "def {fn}(text):\n    return text.lower().split().count('{word}')\n"],
    "fizzbuzz": ["def {fn}(n):\n    return ['Fizz' if i % {k} == 0 else 'Buzz' if i % {m} == 0 else i "
                 "for i in range(1, n + 1)]\n"],
    "rotate": ["def {fn}(xs):\n    return xs[{k}:] + xs[:{k}]\n"],
    "count-above": ["def {fn}(xs):\n    return sum(1 for x in xs if x >= {k})\n"],
    "divisible": ["def {fn}(xs):\n    return [x for x in xs if x % {k} == 0 and x >= 0]\n"],
    "mean-round": ["def {fn}(xs):\n    return sum(xs) / len(xs) if xs else None\n"],
    "word-count": ["def {fn}(text):\n    return len([w for w in text.split(' ') if w])\n"],
    "palindrome": ["def {fn}(text):\n    t = text.lower().replace(' ', '')\n    return t == t[::-1]\n"],
}
EQUIVALENT = {("rotate", (("k", 2),))}  # xs[2:] + xs[:2] is the left rotation by 2 of any list


@cache
def seeds() -> dict[str, SeedTask]:
    return {s.id: s for s in load_seeds(env_paths("code")[0], {})}


@cache
def domain(kind: str) -> tuple[Any, ...]:
    """Every value the sampler of ``kind`` draws (enough draws to see each of its few values)."""
    return tuple(sorted({sample(kind, random.Random(i)) for i in range(2000)}))


def variants(seed: SeedTask) -> list[dict[str, Any]]:
    """Every slot assignment ``sample_values`` can draw (same-kind slots distinct); names cycle over the domain."""
    slots = sorted(s for s in seed.slots if s != "fn")
    names = itertools.cycle(domain("func_name"))
    out = []
    for combo in itertools.product(*(domain(seed.slots[s]) for s in slots)):
        picked = [(seed.slots[s], v) for s, v in zip(slots, combo)]
        if len(set(picked)) == len(picked):
            out.append({"fn": next(names), **dict(zip(slots, combo))})
    return out


def render(seed: SeedTask, values: dict[str, Any]) -> Task:
    meta = TaskMeta(seed_id=seed.id, generator="sampler", row_seed=0, variant=0, category=seed.category)
    return get_env("code").render(seed, {}, seed.templates[0].format(**values), values, meta)


def rewards(jobs: list[tuple[Task, str]]) -> list[float]:
    with ThreadPoolExecutor(4) as pool:  # each sandbox is its own process
        return [v.reward for v in pool.map(lambda job: code.verify(*job), jobs)]


@pytest.mark.parametrize("seed_id", sorted(BUGGY))
def test_buggy_solutions_score_below_one_on_every_variant_and_the_reference_scores_one(seed_id: str) -> None:
    seed = seeds()[seed_id]
    jobs, names = [], []
    for values in variants(seed):
        task = render(seed, values)
        jobs.append((task, f"```python\n{task.reference.answer}```"))
        names.append(("reference", values))
        key = (seed_id, tuple(sorted((k, v) for k, v in values.items() if k != "fn")))
        for i, src in enumerate(BUGGY[seed_id]):
            if key not in EQUIVALENT:
                jobs.append((task, src.format(**values)))
                names.append((f"buggy {i}", values))
    scored = list(zip(names, rewards(jobs)))
    assert [n for n, r in scored if n[0] == "reference" and r != 1.0] == []
    assert [n for n, r in scored if n[0] != "reference" and r >= 1.0] == []


def test_expected_ints_are_matched_exactly() -> None:
    assert not same(10**12, 10**12 + 999) and not same(2**53 + 1, 2**53) and not same(2**53 + 1, float(2**53))
    assert not same(2, 2 * 1.0000000005) and not same(3, float("nan")) and not same(10**400, float("inf"))
    assert same(3, 3) and same(3, 3.0) and same(2**53, float(2**53)) and same(10**400, 10**400)
    assert not same(1, True) and not same(0, False)
    # an expected float keeps its tolerance
    assert same(0.3, 0.1 + 0.2) and same(7.0, 7) and same(1.5, 1.5000000001) and not same(1.5, 10**400)


def test_a_float_nudged_count_fails() -> None:
    task = render(seeds()["count-above"], {"fn": "solve", "k": 7})
    verdict = code.verify(task, "def solve(xs):\n    return sum(1 for x in xs if x > 7) * 1.0000000005\n")
    assert verdict.reward < 0.5 and verdict.failure_class == "test_failure"
    assert code.verify(task, "def solve(xs):\n    return float(sum(1 for x in xs if x > 7))\n").reward == 1.0


@pytest.mark.parametrize(("seed_id", "constant", "most"), [
    ("palindrome", "True", 4 / 7), ("count-word", "0", 3 / 7), ("second-largest", "None", 3 / 7),
    ("count-above", "0", 3 / 6)])
def test_constants_score_at_most_their_share(seed_id: str, constant: str, most: float) -> None:
    seed = seeds()[seed_id]
    jobs = [(render(seed, v), f"def {v['fn']}(*args):\n    return {constant}\n") for v in variants(seed)]
    assert max(rewards(jobs)) <= most + 1e-9
