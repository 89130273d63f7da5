"""Reward hacks a hostile probe found in the math verifier; each attack scored 1.0 on the old code: the
exact-numbers rule was bypassed with a decimal point or scientific notation (12345670.0 and 1.234568e7 for 12345678,
1e-13 for 0 within the absolute tolerance). Exact and correctly rounded decimals still pass."""

from __future__ import annotations

import pytest

from flywheel.schemas import Task
from flywheel.verifiers.envs.math import math as math_verifier


@pytest.mark.parametrize(("reference", "answer"), [
    ("12345678", r"\boxed{12345670.0}"),
    ("12345678", r"\boxed{1.234568e7}"),
    ("12345678", r"\boxed{1.2345680e7}"),
    ("98765432", r"\boxed{98765400.0}"),
    ("123456789012", r"\boxed{123456789000.0}"),
    ("0", r"\boxed{1e-13}"),
    ("0", r"\boxed{0.00000000001}"),
    ("1000000", r"\boxed{1000000.5}"),
    ("1/3", r"\boxed{0.3333334}"),  # not 1/3 rounded at its last digit
    ("1234567/7", r"\boxed{176366.0}"),  # within 1e-6, but the written digit is wrong (176366.714...)
    ("1234567/7", r"\boxed{176370}"),
    ("0.25", r"\boxed{0.2500001}"),  # a decimal reference is the exact number it writes
    ("12345678", r"\boxed{12345677 + sin(1)}"),  # an exact number is equal only when sympy proves it
])
def test_math_decimals_are_the_exact_number_they_write(reference: str, answer: str) -> None:
    verdict = math_verifier.verify(_math_task(reference), answer)
    assert (verdict.reward, verdict.failure_class) == (0.0, "wrong_answer"), verdict


@pytest.mark.parametrize(("reference", "answer"), [
    ("12345678", r"\boxed{12345678.0}"), ("12345678", r"\boxed{1.2345678e7}"), ("1/2", r"\boxed{0.5}"),
    ("1/2", r"\boxed{50\%}"), ("-1/2", r"\boxed{-0.50}"), ("0.25", r"\boxed{\frac{1}{4}}"), ("0", r"\boxed{0.0}"),
    ("1/3", r"\boxed{0.3333333}"), ("2/3", r"\boxed{0.6666667}"), ("1/3", r"\boxed{33.33333\%}"),
    ("1/3", r"\boxed{0.333333}"), ("1/7", r"\boxed{0.142857}"),  # six digits: exactly 1e-6 off (float 1e-6 missed it)
    ("1234567/7", r"\boxed{176366.71}"), ("1234567/7", r"\boxed{176366.7}"), ("\\pi", r"\boxed{3.14159265358979}"),
    ("\\sqrt{41}", r"\boxed{6.4031242}"), ("2", r"\boxed{\log(100)/\log(10)}"), ("x/2", r"\boxed{0.5x}"),
])
def test_math_exact_and_rounded_decimals_still_pass(reference: str, answer: str) -> None:
    verdict = math_verifier.verify(_math_task(reference), answer)
    assert (verdict.reward, verdict.failure_class) == (1.0, None), verdict


def _math_task(reference: str) -> Task:
    return Task.model_validate({"env": "math", "messages": [{"role": "user", "content": "q"}],
                                "reference": {"answer": reference}, "meta": {"seed_id": "p", "category": "math"}})
