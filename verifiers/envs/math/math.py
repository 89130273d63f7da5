"""The math verifier: the final answer compared with the reference, symbolically and numerically.

Contract:
- The answer is the content of ``\\boxed{...}`` (nested braces allowed; a box whose
  braces never close is skipped); with no box, the last line ``Answer: ...``
  (``**Answer:** 25`` too); with neither, the answer the last line's last sentence
  states (``final_sentence``: ``So the answer is 25.``, ``The total is 25 apples.``),
  only when that sentence holds exactly one number, after a conclusion word (answer,
  total, so, thus, ...), with no hedge (or, about, at least, not, thousand, ...) and
  no operator right before it (``x + 25`` is not 25): never a number picked from the
  reasoning above, never one of two. No answer: reward 0.0, ``no_answer``. Boxes that
  are not all equivalent: reward 0.0, ``ambiguous_answer``.
- The answer is read by ``latex.to_text`` (its docstring: Unicode NFKC (full-width
  digits), currency signs, units after a number (``\\text{ cm}^2`` too), thousands
  separators, ``\\frac12``, ``\\sqrt[n]{}``, mixed numbers, repeating decimals,
  ``\\mathbf{}``); units and thousands only when the reference is one number.
- Percent: a percent sign (``%``, ``\\%``, ``percent``) is /100, so ``25\\%`` equals 0.25.
  When the reference is one number, a lone number of at least 1 with a percent sign is
  also its percentage count, the sign dropped on both sides: ``25\\%`` equals a
  reference of 25, and 25 equals a reference of ``25\\%``. A bare reference cannot say
  whether 25 means 25 percent, and the sign on the right count is not another answer;
  the readings are never mixed (``0.25\\%`` is neither 25 nor ``25\\%``), and under 1 the
  sign is only /100 (``0.25\\%`` is not a reference of 0.25: far likelier a slip on a
  fraction than a count below one percent).
- Equivalence (sympy): equal after LaTeX normalization, or numerically equal
  within relative tolerance 1e-6 when both are constants, or ``simplify(a - b)
  == 0``. So 1/2, 0.5, \\frac{1}{2} and 2/4 are equal. Comma-separated answers
  compare element by element; a leading ``x =`` is ignored.
- Untrusted text never reaches ``eval`` unchecked: only digits, letters from a
  whitelist of names, operators and parentheses are parsed, at most 200
  characters, and powers with exponents above 10,000 are refused. Every single
  letter is a plain symbol (sympy's S, N, O, Q, I, E are never reached; ``e`` is
  Euler's number); attribute access (``e.n(9)``) and two numbers side by side
  (``1 234`` unless read as thousands) are refused.
- Two exact numbers (integers, fractions) must be equal, not merely within the
  tolerance: 12345670 is not 12345678. A decimal counts as the number it writes
  (12345678.0 and 1.2345678e7 are 12345678, 0.5 is 1/2), so it must be equal
  too: 12345670.0, 1.234568e7 and 1e-13 (for 0) are wrong. The one exception:
  a fraction with no finite decimal (1/3) may be written as a decimal that is
  the fraction correctly rounded at the decimal's last written digit and within
  the tolerance (0.3333333, not 0.3333334 or 0.333). An exact number against an
  expression that is not one (12345677 + sin(1)) must be proven equal by sympy;
  the tolerance is only for answers whose value is irrational (pi, sqrt(2)).
- Reward 1.0 when equivalent, else 0.0 (``wrong_answer``). The reference is
  ``task.reference.answer``; it must itself be readable as above and within the
  bounds (checked once per reference, in its own bounded call), else the task
  cannot be scored: valid=False ``verifier_error`` for every completion, and
  generation rejects the task (its reference completion does not score 1.0).
- The answer-line pattern and the last-sentence reader are linear in the completion's
  length (no stall before the bounded worker is reached).
- Bounds per completion: the answers are compared in a worker process (``verifiers.bounds``) with at most
  ``LIMITS.cpu_s`` CPU seconds, ``LIMITS.wall_s`` seconds of wall clock and ``LIMITS.memory_bytes`` of memory
  (``\\boxed{exp(exp(exp(100)))}`` would otherwise compute for minutes or more). A completion that
  crosses the time bounds scores 0.0 with failure_class ``timeout``, the memory bound ``too_large``
  (valid=True: the completion's fault). Failure classes: ``no_answer``, ``ambiguous_answer``, ``wrong_answer``,
  ``timeout``, ``too_large``, and ``verifier_error`` (valid=False, reward None) when the verifier itself broke.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from flywheel.schemas import Task, Verdict
from flywheel.verifiers import bounds
from flywheel.verifiers.common import batch_rewards, guarded_verify
from flywheel.verifiers.envs.math.latex import NOT_UNITS, Unparsable, normalize_unicode, to_text

NAME = "math"
VERSION = "1.5.0"  # 1.1: too_large and timeout (bounded sympy work); 1.2: unreadable reference, exact numbers;
#                    1.2.1: an undefined term (0/0) is refused, not cancelled; 1.3: a decimal is the exact number
#                    it writes (12345670.0, 1.234568e7 and 1e-13 no longer pass for 12345678 and 0 by tolerance);
#                    a decimal for a fraction with no finite decimal must be it rounded at its last digit;
#                    1.4: honest forms read (latex.py: thousands separators, currency, units, \frac12, \sqrt[2],
#                    \mathbf, degrees, repeating decimals, mixed numbers, U+2212, **Answer:**, a stray unbalanced
#                    box skipped); single letters are plain symbols (S(623), N(623) no longer evaluate)
#                    1.5: units with a power (\text{ cm}^2), 25\% and 25 percent for a reference of 25 (a percentage
#                    count), NFKC (full-width digits ２５), the answer in the last sentence when there is no box and
#                    no Answer: line (one number, a conclusion word before it, no hedge)
REL_TOL = 1e-6
REL_TOL_EXACT = sympy.Rational(1, 10**6)  # the float 1e-6 is a hair below 10**-6: 0.333333 for 1/3 missed
# 2 CPU seconds is 10x the slowest golden case; the wall bound only backs it up on a loaded machine.
LIMITS = bounds.Limits(cpu_s=2, wall_s=8.0, memory_bytes=2 << 30, warm=("flywheel.verifiers.envs.math.math",))
NAMES = {"sqrt": sympy.sqrt, "pi": sympy.pi, "oo": sympy.oo, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan,
         "log": sympy.log, "ln": sympy.log, "exp": sympy.exp, "e": sympy.E}
_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor)
# Every letter is a plain symbol unless NAMES says otherwise: sympy's S, N, O, Q, I, E never reach the answer.
_LOCALS = {**{c: sympy.Symbol(c) for c in string.ascii_letters}, **NAMES}
_SAFE = re.compile(r"^[0-9a-z+\-*/().,\s^]*$")
_REFUSED = re.compile(r"\.\s*[a-z]|\d\s+\.?\d", re.I)  # attribute access (e.n(9)); two numbers side by side (1 234)
# linear: one flat class per run of characters, and the greedy (.*\S) backtracks only over trailing blanks
_ANSWER_LINE = re.compile(r"^[ \t*_#>]*(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(.*\S)[ \t\r]*$", re.I | re.M)
# the last sentence states the answer only after one of these words, and never next to a hedge
_CUES = {"answer", "total", "result", "therefore", "thus", "hence", "so", "finally", "altogether", "overall", "sum",
         "product", "value"}
_SENTENCE_HEDGES = (NOT_UNITS - {"and", "to", "at", "e", "i", "percent", "percentage", "pct"}) | {
    "probably", "likely", "might", "may", "could", "would", "guess", "estimate", "close", "near", "nearest", "within",
    "range", "like", "some", "somewhere", "round", "rounds", "rounded", "rounding", "unsure", "uncertain", "isn",
    "wasn", "aren", "doesn", "don", "didn", "won", "cannot", "can", "never", "instead", "wrong", "incorrect", "check",
    "verify", "wait", "suppose", "assume", "assuming", "try", "possible", "option", "options", "choice", "choices",
    "candidate", "candidates", "unknown", "twice", "thrice", "double", "doubled", "triple", "tripled", "square",
    "cube", "power", "factor", "factors", "multiple", "multiples", "divisor", "divisors", "one", "two", "three",
    "four", "five", "six", "seven", "eight", "nine", "ten", "twenty", "fifth", "fifths", "sixth", "seventh", "eighth",
    "ninth"}
# what may stand right before the number: a word (is, equals:), or a letter and = (x = 25); a $, \( or ** and a sign
# after it. Not an operator, bracket or lone letter: x + 25, x - 25 and (25 - 1) are not 25.
_LEAD = re.compile(r"(?:(?<![A-Za-z])[A-Za-z]\s*=|[A-Za-z]{2,}\s*[:=]?|:)\s*(?:\\?\$|\\\(|\*\*){0,2}\s*"
                   r"([-\u2212]?)\s*$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")  # 25, 2.5, 1,234 (1,2,3 too: a list, which never equals one number)
_GLOBALS: dict[str, Any] = {}
exec("from sympy import *", _GLOBALS)  # the names parse_expr's generated code refers to (Integer, Symbol, ...)


def _closing_braces(text: str) -> dict[int, int]:
    """The index of the ``}`` that closes each balanced ``{`` (one pass: a stray box cannot make it quadratic)."""
    opened, closing = [], {}
    for i, char in enumerate(text):
        if char == "{":
            opened.append(i)
        elif char == "}" and opened:
            closing[opened.pop()] = i
    return closing


def extract_answers(text: str) -> list[str]:
    """The boxes' contents (an unbalanced box is skipped), else the last answer line's (markdown ``*`` gone)."""
    boxes, i, closing = [], 0, None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        closing = _closing_braces(text) if closing is None else closing
        if m.start() < i or m.end() - 1 not in closing:
            continue
        boxes.append(text[m.end():closing[m.end() - 1]])
        i = closing[m.end() - 1] + 1
    if boxes:
        return boxes
    lines = _ANSWER_LINE.findall(text)
    stated = [line.strip("*_ \t") for line in lines[-1:]] or [final_sentence(text)]
    return [answer for answer in stated if answer]


def final_sentence(text: str) -> str:
    """The answer a completion's last sentence states (``So the answer is 25.``, ``The total is 25 apples.``): from
    its one number (a sign before it kept) to the sentence's end, read like an answer line; '' unless the last line's
    last sentence holds exactly one number (an exponent, as in cm^2, is no number), a conclusion word before it
    (_CUES) and no hedge (_SENTENCE_HEDGES: or, about, at least, not, thousand, ...). Linear: one split, one scan."""
    line = normalize_unicode(text.rstrip().rpartition("\n")[2]).strip(" \t*_#>")
    if "\\boxed" in line or "\\fbox" in line:
        return ""
    sentence = re.split(r"(?<=[.!?])\s+", line)[-1].rstrip("*_ ")
    numbers = [m.start() for m in _NUMBER.finditer(sentence)
               if not sentence[max(0, m.start() - 2):m.start()].endswith(("^", "^{"))]
    if len(numbers) != 1:
        return ""
    before = sentence[:numbers[0]]
    words = set(re.findall(r"[a-z]+", before.lower()))
    lead = _LEAD.search(before[-40:])  # a bounded tail: the anchored search stays linear
    if lead is None or not words & _CUES or words & _SENTENCE_HEDGES:
        return ""
    return ("-" if lead.group(1) else "") + sentence[numbers[0]:].rstrip(". *_")


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
    return sympy.simplify(sympy.sympify(_written(a)) - sympy.sympify(_written(b))) == 0


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


def math_reward(completions: list[Any], task: list[Any], **_: Any) -> list[float | None]:
    """TRL reward function (``task`` column); rows of other envs give None."""
    return batch_rewards(NAME, verify, completions, task)
