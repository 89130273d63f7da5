"""Reward hacks a hostile probe found in the code env: number tolerance on expected ints (``count * 1.0000000005``
passed count-above), and seed inputs that missed whole clauses of the spec, so a wrong solution scored 1.0
(second-largest without dedupe, count-word as a substring, fizzbuzz without FizzBuzz, rotate without modulo,
count-above with >=, divisible dropping negatives, mean-round never rounding). Every buggy version below scored
1.0 on some variant the samplers draw before code 1.3; now each scores below 1.0 on every variant, and each seed's
reference still scores 1.0."""

from __future__ import annotations

import copy
import itertools
import json
import random
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import pytest

from flywheel.schemas import SeedTask, Task, TaskMeta
from flywheel.schemas.seeds import placeholders
from flywheel.tasks.data.generate import candidate, generate_candidates
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


def shown(seed: SeedTask) -> list[str]:
    """The slots the request shows, but the function name; the others are hidden test inputs."""
    return sorted(s for s in seed.slots if s != "fn" and "{" + s + "}" in seed.templates[0])


def hidden(seed: SeedTask, i: int) -> dict[str, Any]:
    """The hidden test inputs of variant ``i``, drawn as generation draws them (same-kind slots distinct)."""
    values: dict[str, Any] = {}
    for slot in sorted(set(seed.slots) - set(shown(seed)) - {"fn"}):
        rng, taken = random.Random(f"{seed.id}:{i}:{slot}"), [v for k, v in values.items()
                                                             if seed.slots[k] == seed.slots[slot]]
        values[slot] = next(v for v in (sample(seed.slots[slot], rng) for _ in range(50)) if v not in taken)
    return values


def variants(seed: SeedTask) -> list[dict[str, Any]]:
    """Every assignment of the shown slots ``sample_values`` can draw (same-kind slots distinct), each with its
    own hidden test inputs; names cycle over the domain."""
    slots = shown(seed)
    names = itertools.cycle(domain("func_name"))
    out = []
    for combo in itertools.product(*(domain(seed.slots[s]) for s in slots)):
        picked = [(seed.slots[s], v) for s, v in zip(slots, combo)]
        if len(set(picked)) == len(picked):
            out.append({"fn": next(names), **dict(zip(slots, combo)), **hidden(seed, len(out))})
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
        key = (seed_id, tuple((k, values[k]) for k in shown(seed)))
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
    task = render(seeds()["count-above"], {"fn": "solve", "k": 7, **hidden(seeds()["count-above"], 0)})
    verdict = code.verify(task, "def solve(xs):\n    return sum(1 for x in xs if x > 7) * 1.0000000005\n")
    assert verdict.reward < 0.5 and verdict.failure_class == "test_failure"
    assert code.verify(task, "def solve(xs):\n    return float(sum(1 for x in xs if x > 7))\n").reward == 1.0


def constant_source(task: Task) -> tuple[str, float]:
    """A function returning the task's most common expected output, and the share of tests it passes."""
    outputs = [t.expected for t in task.reference.tests]
    best = max(outputs, key=lambda o: sum(same(o, x) for x in outputs))
    share = sum(same(best, x) for x in outputs) / len(outputs)
    return f"def {task.reference.entry_point}(*args):\n    return {best!r}\n", round(share, 10)


@pytest.mark.parametrize("seed_id", sorted(seeds()))
def test_the_best_constant_of_every_variant_scores_below_one_and_at_most_half_on_average(seed_id: str) -> None:
    """The hidden random inputs spread the outputs (binary-search's -1, count-above's 0 took 3 of 4 fixed tests):
    the most common expected output, returned whatever the input, never passes every test and passes at most half
    of them on average (palindrome's outputs are booleans: at most two thirds)."""
    seed = seeds()[seed_id]
    tasks = [render(seed, {**v, **hidden(seed, i)}) for i, v in zip(range(6), itertools.cycle(variants(seed)))]
    jobs = [(task, constant_source(task)[0]) for task in tasks]
    scored = rewards(jobs)
    assert scored == [constant_source(task)[1] for task in tasks]  # what the sandbox scored is the share
    assert max(scored) < 1.0 and sum(scored) / len(scored) <= (2 / 3 if seed_id == "palindrome" else 0.5)


def test_a_table_memorised_from_train_variants_fails_held_out_variants() -> None:
    """Seeds whose request shows only the function name had the same tests in every variant, so a table of train's
    answers passed held-out (``{1: 0, 6: 8, 27: 111, 7: 16}.get(n)`` for collatz). Each variant now draws its own
    hidden inputs (from its row seed, as generation draws them): the table passes the fixed tests and no more."""
    order = [s for s in seeds().values() if not shown(s)]
    assert len(order) >= 15
    built = generate_candidates(range(6 * len(order)), order, {}, 0)[0]
    tasks = [Task.model_validate_json(r["task"]) for r in built]
    jobs = []
    for seed in order:
        mine = [t for t in tasks if t.meta.seed_id == seed.id]
        table = {repr(tuple(c.args)): c.expected for t in mine[:4] for c in t.reference.tests}
        for task in mine[4:]:
            jobs.append((task, f"T = {table!r}\ndef {task.reference.entry_point}(*args):\n"
                               "    return T.get(repr(args))\n"))
    scored = rewards(jobs)
    assert len(scored) == 2 * len(order) and max(scored) < 1.0
    assert generate_candidates(range(6 * len(order)), order, {}, 0)[0] == built  # the same seed, the same inputs


def _merge_without_max(intervals: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = end  # a nested interval shrinks the merged one
        else:
            out.append([start, end])
    return out


# seed -> a cheap wrong solution (from the variant's shown values) that a table of the fixed tests' answers, the same
# in every variant, could fall back on for the rest (review probe: >= for count-above passed every hidden input of
# 86% of variants, a case-only palindrome check 96%, substring counts 85%, merging without max 57%)
FALLBACKS: dict[str, Any] = {
    "count-above": lambda v: lambda xs: sum(x >= v["k"] for x in xs),
    "palindrome": lambda v: lambda text: text.lower() == text.lower()[::-1],
    "count-word": lambda v: lambda text: text.lower().count(v["word"]),
    "merge-intervals": lambda v: _merge_without_max,
    "gcd": lambda v: lambda a, b: 1, "divisible": lambda v: lambda xs: [], "binary-search": lambda v: lambda xs, t: -1,
    "second-largest": lambda v: lambda xs: None, "max-gap": lambda v: lambda xs: 0,
}


def test_the_hidden_inputs_hit_the_clauses_a_memorised_table_plus_a_cheap_fallback_would_miss() -> None:
    """The hidden inputs are each variant's own, so a policy can only memorise the fixed ones: the hidden ones must
    catch the cheap wrong solution it would fall back on (k inside count-above's lists, palindromes with punctuation
    on one side only, longer words holding the word, nested intervals, shared factors). The fallbacks run here, in
    the test: they are our code, compared by the verifier's own ``same``."""
    order = [seeds()[s] for s in sorted(FALLBACKS)]
    passed: dict[str, int] = dict.fromkeys(FALLBACKS, 0)
    for k in range(60 * len(order)):
        task, values = candidate(k, order, {}, 0)
        seed = seeds()[task.meta.seed_id]
        fallback = FALLBACKS[seed.id](values)
        hidden_tests = [t for t, given in zip(task.reference.tests, seed.inputs, strict=True)
                        if set(placeholders(json.dumps(given))) - set(shown(seed)) - {"fn"}]
        assert len(hidden_tests) == 4
        passed[seed.id] += all(same(t.expected, json.loads(json.dumps(fallback(*copy.deepcopy(t.args)))))
                               for t in hidden_tests)
    assert max(passed.values()) <= 3, passed  # of 60 variants each
