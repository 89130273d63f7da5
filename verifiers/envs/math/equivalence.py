"""Whether two math answers are equivalent (sympy): plain-text parsing under a whitelist, exact numbers compared
exactly, irrational values within ``REL_TOL``, expressions by ``simplify(a - b) == 0``. ``compare`` and
``read_reference`` are the steps the math verifier runs in its bounded worker; the rules are in this env's
README.md."""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from flywheel.verifiers.envs.math.latex import Unparsable, to_text

REL_TOL = 1e-6
REL_TOL_EXACT = sympy.Rational(1, 10**6)  # the float 1e-6 is a hair below 10**-6: 0.333333 for 1/3 missed
NAMES = {"sqrt": sympy.sqrt, "pi": sympy.pi, "oo": sympy.oo, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan,
         "log": sympy.log, "ln": sympy.log, "exp": sympy.exp, "e": sympy.E}
_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor)
# Every letter is a plain symbol unless NAMES says otherwise: sympy's S, N, O, Q, I, E never reach the answer.
_LOCALS = {**{c: sympy.Symbol(c) for c in string.ascii_letters}, **NAMES}
_SAFE = re.compile(r"^[0-9a-z+\-*/().,\s^]*$")
_REFUSED = re.compile(r"\.\s*[a-z]|\d\s+\.?\d", re.I)  # attribute access (e.n(9)); two numbers side by side (1 234)
_GLOBALS: dict[str, Any] = {}
exec("from sympy import *", _GLOBALS)  # the names parse_expr's generated code refers to (Integer, Symbol, ...)


def _check_powers(expr: sympy.Basic) -> None:
    """Refuse exponents above 10,000 and constants beyond 1e300: exact evaluation could run for hours."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_number and abs(sympy.N(node.exp, 15)) > 10_000:
            raise Unparsable("exponent too large")
    if not expr.free_symbols and sympy.N(expr, 15).is_finite is not False and abs(sympy.N(expr, 15)) > 1e300:
        raise Unparsable("number too large")  # oo and -oo are answers (a limit), not large numbers


@lru_cache(maxsize=65536)
def to_expr(part: str) -> sympy.Basic:
    if len(part) > 200 or not _SAFE.match(part.lower()) or "\\" in part or _REFUSED.search(part):
        raise Unparsable(f"not a plain math expression: {part[:60]!r}")
    words = set(re.findall(r"[a-z]{2,}", part.lower()))
    if words - set(NAMES):
        raise Unparsable(f"unknown names {sorted(words - set(NAMES))}")
    try:
        expr = parse_expr(part, local_dict=dict(_LOCALS), global_dict=_GLOBALS, transformations=_TRANSFORMS,
                          evaluate=False)
        _check_powers(expr)
        if expr.doit().has(sympy.nan, sympy.zoo):  # x + 0/0 must not cancel to x
            raise Unparsable(f"undefined value (0/0 or a division by zero) in {part[:60]!r}")
        return expr
    except Unparsable:
        raise
    except Exception as err:  # sympy's parser raises many kinds; all mean "cannot read this answer"
        raise Unparsable(f"cannot parse {part[:60]!r}: {type(err).__name__}") from None


def _written(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` with each decimal replaced by the exact number it writes (1.234568e7 -> 12345680, 0.1 -> 1/10):
    a Float's str round-trips the digits it was parsed from."""
    return expr.xreplace({f: sympy.Rational(str(f)) for f in expr.atoms(sympy.Float)})


def _decimals(value: sympy.Rational) -> int | None:
    """Digits after the point of a number with a finite decimal (5/2 -> 1, 12 -> 0); None when it has none (1/3)."""
    q = int(value.q)
    twos, fives = sympy.multiplicity(2, q), sympy.multiplicity(5, q)
    return max(twos, fives) if q == 2 ** twos * 5 ** fives else None


def _rounded(decimal: sympy.Basic, written: sympy.Rational, exact: sympy.Rational) -> bool:
    """Whether ``decimal`` (an answer with decimals, worth ``written``) writes the fraction ``exact``, which has no
    finite decimal, correctly rounded at its last digit and within the tolerance (0.3333333 for 1/3)."""
    digits = _decimals(written)
    if not decimal.atoms(sympy.Float) or digits is None or _decimals(exact) is not None:
        return False
    error = abs(written - exact)
    return bool(2 * error * 10 ** digits <= 1 and error <= REL_TOL_EXACT * abs(exact))


def _same_number(a: sympy.Basic, b: sympy.Basic) -> bool:
    exact_a, exact_b = _written(a).doit(), _written(b).doit()
    if exact_a.is_Rational and exact_b.is_Rational:  # integers, fractions, decimals: no tolerance
        return bool(exact_a == exact_b) or _rounded(a, exact_a, exact_b) or _rounded(b, exact_b, exact_a)
    if any(v.is_Rational and not e.atoms(sympy.Float) for v, e in ((exact_a, a), (exact_b, b))):
        return bool(sympy.simplify(exact_a - exact_b) == 0)  # an exact number: equal only when sympy proves it
    x, y = complex(sympy.N(a, 30)), complex(sympy.N(b, 30))
    return math.isclose(x.real, y.real, rel_tol=REL_TOL, abs_tol=1e-12) and \
        math.isclose(x.imag, y.imag, rel_tol=REL_TOL, abs_tol=1e-12)


def _same(a: sympy.Basic, b: sympy.Basic) -> bool:
    if not a.free_symbols and not b.free_symbols:
        return _same_number(a, b)
    # answers parse to expressions (sympy.Expr): Basic itself declares no `-`
    difference = cast(sympy.Expr, sympy.sympify(_written(a))) - cast(sympy.Expr, sympy.sympify(_written(b)))
    return sympy.simplify(difference) == 0


def _one_number(text: str) -> bool:
    """Whether ``text`` (normalized) is one number: then thousands separators and units are read (latex.to_text)."""
    try:
        return "," not in text and not to_expr(text.strip()).free_symbols
    except Unparsable:
        return False


def _equal_texts(a: str, b: str) -> bool:
    if a.replace(" ", "") == b.replace(" ", ""):
        return True
    parts_a, parts_b = a.split(","), b.split(",")
    if len(parts_a) != len(parts_b):
        return False
    return all(_same(to_expr(x.strip()), to_expr(y.strip())) for x, y in zip(parts_a, parts_b, strict=True))


def equivalent(answer: str, reference: str) -> bool:
    """Equal as written (a percent sign is /100); when the reference is one number, also equal as percentage counts
    (the sign dropped on both sides: 25\\% is 25, and 25 answers a reference of 25\\%). Either reading, never a
    mix: 0.25\\% is neither 25\\% nor 25."""
    b = to_text(reference)
    number = _one_number(b)
    readings = [(to_text(answer, number=number), b)]
    if number:
        counts = to_text(answer, number=True, count=True), to_text(reference, number=True, count=True)
        readings += [counts] if counts != readings[0] else []
    return any(_safe(_equal_texts, x, y) for x, y in readings)


def _safe(compare_texts: Callable[[str, str], bool], answer: str, reference: str) -> bool:
    try:
        return compare_texts(answer, reference)
    except (Unparsable, TypeError, ValueError, OverflowError):
        return False


def _safe_equivalent(answer: str, reference: str) -> bool:
    return _safe(equivalent, answer, reference)


def compare(answers: list[str], reference: str) -> tuple[bool, bool]:
    """(the boxes agree, the last one equals the reference): the sympy work, run in a bounded worker."""
    consistent = all(_safe_equivalent(other, answers[-1]) or _safe_equivalent(answers[-1], other)
                     for other in answers[:-1])  # both ways: \boxed{1234} and \boxed{1,234} agree
    return consistent, consistent and _safe_equivalent(answers[-1], reference)


def read_reference(reference: str) -> None:
    """Unparsable when the reference cannot be compared: every part must parse within the bounds (run bounded)."""
    text = to_text(reference)
    for part in text.split(","):
        to_expr(part.strip())
