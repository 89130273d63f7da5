"""Honest answer forms the math verifier read as wrong before 1.4.0 and 1.5.0 (a probe scored each 0), and the near
misses and hedges that must still score 0 next to them.

1.5.0: units with a power (\\text{ cm}^2), a percent sign on a percentage count (25\\% for a reference of 25: before,
25\\% and 25 percent were near misses here), NFKC (full-width digits), and the answer stated in the last sentence when
there is no box and no Answer: line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task
from flywheel.verifiers.envs.math import math as math_verifier
from flywheel.verifiers.envs.math.latex import MAX_CHARS, Unparsable, to_text


def _task(reference: str) -> Task:
    return Task.model_validate({"env": "math", "messages": [{"role": "user", "content": "q"}],
                                "reference": {"answer": reference}, "meta": {"seed_id": "p", "category": "math"}})


HONEST = [
    # thousands separators (the reference is one number)
    ("1234", r"\boxed{1,234}"), ("1234", r"\boxed{1{,}234}"), ("1234567", r"\boxed{1,234,567}"),
    ("-1234", r"\boxed{-1,234}"), ("2469/2", r"\boxed{1,234.5}"), ("1234", r"\boxed{1 234}"),
    # currency and units
    ("68", r"\boxed{\$68}"), ("68", r"\boxed{\$68.00}"), ("68", r"\boxed{68 \text{ dollars}}"),
    ("68", r"\boxed{\text{\$}68}"), ("1234", r"\boxed{\$1,234}"), ("25", "Answer: 25 apples"),
    ("425", "So:\nAnswer: 425 boxes."), ("120", r"\boxed{120 \text{ square meters}}"), ("60", "Answer: 60 km/h"),
    ("60", r"\boxed{60\,\mathrm{km/h}}"), ("5", r"\boxed{5\text{ m}}"), ("7/2", r"\boxed{3.5 \text{ cookies}}"),
    # LaTeX
    ("1/2", r"\boxed{\frac12}"), ("1/2", r"\boxed{\dfrac12}"), ("1/2", r"\boxed{\frac1{2}}"),
    ("pi/2", r"\boxed{\frac\pi2}"),
    ("25", r"\boxed{25^{\circ}}"), ("25", r"\boxed{25^\circ}"), ("25", r"\boxed{25°}"), ("25", r"\boxed{\mathbf{25}}"),
    ("25", r"\boxed{\textbf{25}}"), ("25", r"\boxed{\mathrm{25}}"), ("sqrt(41)", r"\boxed{\sqrt[2]{41}}"),
    ("2", r"\boxed{\sqrt[3]{8}}"), ("sqrt(2)", r"\boxed{\sqrt2}"), ("5*sqrt(2)", r"\boxed{5\sqrt2}"),
    # repeating decimals: the exact fraction, and a rounded decimal reference accepts it as it accepts 1/3
    ("1/3", r"\boxed{0.\overline{3}}"), ("1/6", r"\boxed{0.1\overline{6}}"), ("1/7", r"\boxed{0.\overline{142857}}"),
    ("4/3", r"\boxed{1.\overline{3}}"), ("0.3333333", r"\boxed{0.\overline{3}}"),
    # mixed numbers: the sum
    ("51/4", r"\boxed{12\frac{3}{4}}"), ("5/2", r"\boxed{2\frac{1}{2}}"), ("-5/2", r"\boxed{-2\frac12}"),
    ("51/4", r"\boxed{12 \frac{3}{4}}"),
    # Unicode minus, answer lines
    ("-5", "\\boxed{\u22125}"), ("25", "**Answer:** 25"), ("25", "**Answer: 25**"), ("25", r"Answer: \(25\)"),
    ("25", r"Answer: $25$"), ("25", "**Final Answer:** $\\boxed{25}$"),
    # a stray unbalanced box is skipped; agreeing boxes in either form agree
    ("25", r"\boxed{25} and then \boxed{"), ("25", r"\boxed{25}" + " " * 10_000 + r"\boxed{"),
    ("25", r"\boxed{ \boxed{25}"),
    ("1234", r"\boxed{1234} so \boxed{1,234}"), ("1234", r"\boxed{1,234} so \boxed{1234}"),
    # lists and symbols as before
    ("1, 2", r"\boxed{1,2}"), ("1, 234", r"\boxed{1, 234}"), ("1, 234", r"\boxed{1,234}"),
    ("x^2 - 1", r"\boxed{(x-1)(x+1)}"),
]

HONEST_1_5 = [
    # units with a power
    ("25", r"\boxed{25 \text{ cm}^2}"), ("25", r"\boxed{25\text{ cm}^{2}}"), ("25", r"\boxed{25\,\mathrm{cm^2}}"),
    ("25", r"\boxed{25 \text{ m}^3}"), ("25", "Answer: 25 cm^2"), ("25", "Answer: 25 cm\u00b2"),
    ("49/5", r"\boxed{9.8 \text{ m/s}^2}"),
    # percent: /100 as before, and the percentage count when the reference is one number (either, never mixed)
    ("25", "Answer: 25 percent"), ("25", r"\boxed{25\%}"), ("25", "Answer: 25%"), ("12", r"\boxed{12\%}"),
    ("25", r"\boxed{25 percent}"), ("25", r"\boxed{25 \text{ percent}}"), ("25", r"\boxed{x = 25\%}"),
    ("25/2", r"\boxed{12.5\%}"), ("0.25", r"\boxed{25\%}"), ("0.25", "Answer: 25 percent"), ("25\\%", r"\boxed{25}"),
    ("25\\%", r"\boxed{0.25}"), ("25\\%", r"\boxed{25\%}"),
    # Unicode NFKC: full-width and mathematical digits; superscripts are powers, vulgar fractions mixed numbers
    ("25", "\\boxed{\uff12\uff15}"), ("25", "Answer: \uff12\uff15"), ("25", "Answer: \uff12\uff15\uff05"),
    ("-25", "\\boxed{\uff0d\uff12\uff15}"), ("25", "\\boxed{\U0001d7d0\U0001d7d3}"), ("25", "\\boxed{5\u00b2}"),
    ("7/2", "\\boxed{3\u00bd}"),
    # the answer stated in the last sentence (no box, no Answer: line)
    ("25", "Let me think.\nSo the answer is 25."), ("25", "Work: 3+4=7.\nThe total is 25 apples."),
    ("25", "3 + 4 = 7. So the answer is 25."), ("-5", "So the answer is $-5$."), ("5/2", "Thus the result is 2.5."),
    ("1234", "The total is 1,234 dollars."), ("25", "The answer is **25**."), ("25", "**The answer is 25.**"),
    ("25", r"The answer is \(25\)."), ("25", "The total area is 25 cm^2."), ("25", "Therefore x = 25"),
    ("25", "So the answer is \uff12\uff15."), ("25", "So the answer is 25%."), ("68", r"So the total is $\$68$."),
    ("25", "The answer is 5^2."), ("25", "The answer is: 25"), ("-25", "So the answer is \u221225."),
]

NEAR_MISSES_AND_HEDGES = [
    ("1234", r"\boxed{12,34}"), ("1234", r"\boxed{1, 234}"), ("1234", r"\boxed{1,2345}"), ("1234", r"\boxed{1,235}"),
    ("1234", r"\boxed{1,234, 5}"), ("1234", r"\boxed{\$1,235}"), ("68", r"\boxed{\$67.99}"), ("234", r"\boxed{1 234}"),
    ("6", r"\boxed{2 3}"), ("25", r"\boxed{25 \text{ or } 26}"), ("25", r"\boxed{25 \text{ or more}}"),
    ("25", "Answer: 25 or more"), ("25", "Answer: at least 25"), ("25", "Answer: 25 or 26"),
    ("25", r"\boxed{25 \text{ apples or } 26}"), ("25", r"\boxed{25 \text{ (or 26)}}"), ("25", r"\boxed{25 thousand}"),
    ("25", r"\boxed{25 squared}"), ("25", r"\boxed{25 pi}"), ("25", r"\boxed{25 x}"),
    ("25", r"\boxed{25\text{ approximately}}"), ("25", r"\boxed{25 \text{ plus tax}}"),
    ("25", "Answer: 25 \\text{ or } 26"),
    ("1", r"\boxed{2\frac{1}{2}}"), ("3/2", r"\boxed{3\frac{1}{2}}"),  # a mixed number is the sum, never the product
    ("1/3", r"\boxed{0.\overline{34}}"), ("1/3", r"\boxed{0.3\overline{4}}"), ("5", r"\boxed{\sqrt[3]{25}}"),
    ("25", r"\boxed{\mathbf{26}}"), ("-5", r"\boxed{5}"), ("25", "**Answer:** 26"), ("25", r"\boxed{-25^{\circ}}"),
    ("25", r"\boxed{25}\boxed{26}"), ("25", r"\boxed{25}\boxed{26}\boxed{"), ("42", r"\boxed{42"),
    ("623", r"\boxed{S(623)}"), ("623", r"\boxed{N(623)}"), ("623", r"\boxed{623 + O(1)}"), ("2", r"\boxed{E}"),
    ("2.718281828", r"\boxed{e.n(30)}"), ("25", r"\boxed{\text{twenty five}}"),
]

ATTACKS_1_5 = [
    # units with a power: the power belongs to the unit, never to the number, and a hedge still keeps the tail
    ("625", r"\boxed{25 \text{ cm}^2}"), ("25", r"\boxed{5 \text{ cm}^2}"),
    ("25", r"\boxed{25 \text{ cm}^2 \text{ or } 26}"), ("25", r"\boxed{25 \text{ cm}^2 26}"),
    ("25", r"\boxed{25 \text{ or more}^2}"), ("25", r"\boxed{25^2}"),
    # percent: one lone number; the two readings never mix; under 1 only /100
    ("25", r"\boxed{25\% or 26\%}"), ("25", "Answer: 25 percent or more"), ("25", "Answer: 25 or 26 percent"),
    ("25", r"\boxed{25\%\%}"), ("25", r"\boxed{25\% + 1}"), ("25", r"\boxed{25 percent thousand}"),
    ("25", r"\boxed{x\%}"),
    ("0.25", r"\boxed{0.25\%}"), ("25", r"\boxed{0.25\%}"), ("25\\%", r"\boxed{0.25\%}"), ("0.25", r"\boxed{25}"),
    ("25", r"\boxed{2500}"), ("25", r"\boxed{25}\boxed{26\%}"),
    # Unicode: a hedge stays a hedge; 5² is not 52, 3½ is not 31 or 31/2, a subscript is no digit
    ("25", "\\boxed{\uff12\uff15 or \uff12\uff16}"), ("52", "\\boxed{5\u00b2}"), ("31", "\\boxed{3\u00bd}"),
    ("31/2", "\\boxed{3\u00bd}"), ("1", "\\boxed{x\u2081}"), ("11", "\\boxed{1\u2081}"),
    ("25", "\\boxed{" + "\ufdfd" * 100 + "25}"),
    # the last sentence: one number, a conclusion word, no hedge, no operator before it; never from the reasoning
    ("25", "So the answer is 25 or 26."), ("25", "The answer is about 25."), ("25", "The answer is at least 25."),
    ("25", "The answer is not 25."), ("25", "The answer isn't 25."), ("25", "So the answer is 25 thousand."),
    ("25", "So the answer is 25 or so."), ("25", "The answer is maybe 25."), ("25", "The answer is 25, or 26."),
    ("25", "So the answer is 25 or more."), ("25", "So the answer is approximately 25."), ("25", "We need 25 apples."),
    ("25", "The answer is 25.\nWait, let me check 3 and 4 again."), ("25", "So the answer is 25. Or 26."),
    ("25", " ".join(str(n) for n in range(1, 101))), ("25", "So the answer is " + ", ".join(map(str, range(101)))),
    ("25", "So the answer is " + " or ".join(map(str, range(101)))), ("25", "The answer is one of 24, 25, 26."),
    ("25", "The total is 25x."), ("120", "So the answer is 5!"), ("25", "So the answer is 25!"),
    ("25", "The total is 25 apples and 3 pears."), ("25", "So the answer is \\boxed{25"),
    ("25", "So the answer is between 24 and 26."), ("25", "Step 1: the total is 12.\nStep 2: it is 25.\nCheck."),
    ("25", "So the answer is up to 25."), ("25", "So I guess the answer is 25."),
    ("25", "So the answer is close to 25."),
    ("25", "So the answer is 25 cm^2 or 26."), ("25", "The answer is 25 if x > 0."), ("25", "So the answer is 2 5."),
    ("25", "So 25 - 26 is the answer."), ("625", "The answer is 25 cm^2."), ("25", "So the answer is 25^{2}."),
    ("25", "So the answer is x + 25."), ("-25", "So the answer is x - 25."), ("25", "So the answer is x^2 + 25."),
    ("5", "So the answer is sqrt 25."), ("25", r"So the answer is \sqrt{25}."), ("25", "So the answer is twice 25."),
    ("125", "So the answer is one fifth of 125."), ("25", "So the answer is (25 - 1)."), ("25", "The answer is y 25."),
    ("25", "So the answer is 25/x."), ("25", "She has 25 apples."),
    ("25", "\\boxed{26}\nSo the answer is 25."), ("25", "Answer: 26\nSo the answer is 25."),  # a box or line wins
]


@pytest.mark.parametrize(("reference", "completion"), HONEST + HONEST_1_5)
def test_honest_answer_forms_score_full_reward(reference: str, completion: str) -> None:
    verdict = math_verifier.verify(_task(reference), completion)
    assert (verdict.reward, verdict.failure_class) == (1.0, None), verdict


@pytest.mark.parametrize(("reference", "completion"), NEAR_MISSES_AND_HEDGES + ATTACKS_1_5)
def test_near_misses_and_hedges_still_score_zero(reference: str, completion: str) -> None:
    verdict = math_verifier.verify(_task(reference), completion)
    assert (verdict.valid, verdict.reward) == (True, 0.0), verdict


def test_differing_balanced_boxes_stay_ambiguous_next_to_a_stray_box() -> None:
    verdict = math_verifier.verify(_task("25"), r"\boxed{25} \boxed{26} \boxed{")
    assert verdict.failure_class == "ambiguous_answer"


def test_every_seed_and_case_reference_scores_full_reward() -> None:
    """Each seed's own example (its reference as generation renders it) and each golden case's reference."""
    seeds_path, tools_path = env_paths("math")
    tools = load_tools(tools_path) if tools_path.is_file() else {}
    references = [seed_task(seed, tools).reference.answer for seed in load_seeds(seeds_path, tools)]
    cases = Path(seeds_path).with_name("cases.jsonl").read_text().splitlines()
    references += [answer for line in cases if (answer := json.loads(line)["task"]["reference"]["answer"])]
    assert len(references) > 40
    for reference in references:
        verdict = math_verifier.verify(_task(reference), f"\\boxed{{{reference}}}")
        assert verdict.reward == 1.0, (reference, verdict)


def test_the_reader_refuses_long_answers_before_any_work() -> None:
    with pytest.raises(Unparsable):
        to_text("1" * (MAX_CHARS + 1))


@pytest.mark.parametrize("completion", ["Answer: 1" + " " * 200_000 + "x", "*" * 200_000 + "\nAnswer:",
                                        "\\boxed{" * 50_000, "**Answer:** " + "* " * 100_000])
def test_answer_extraction_stays_linear(completion: str) -> None:
    """Before 1.4.0, 'Answer: 1', 20,000 spaces and a letter took 4 s in the caller (the lazy answer group
    backtracked over the blanks); a run of stray boxes would have rescanned the text once per box."""
    started = time.monotonic()
    math_verifier.extract_answers(completion)
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("line", ["So the answer is " + "1" * 20_000 + ".", "So the answer is " + " " * 20_000 + "x",
                                  "So " + "1. " * 7_000, "So the total is " + "a " * 10_000 + "25",
                                  "So the answer is " + "^" * 20_000 + "25", "So x" + "1,1" * 7_000,
                                  "The total is " + "$" * 20_000 + "25", "So " + "\uff12" * 20_000])
def test_the_last_sentence_reader_stays_linear(line: str) -> None:
    """A 20,000-character last line is read (and scored) in well under a second."""
    started = time.monotonic()
    math_verifier.final_sentence(line)
    math_verifier.verify(_task("25"), line)
    assert time.monotonic() - started < 2.0
