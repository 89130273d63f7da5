"""The math env: a problem whose answer is checked for exact equivalence (sympy)."""

from __future__ import annotations

from pathlib import Path

from flywheel.verifiers.envs.math import math
from flywheel.verifiers.render import answer_reference
from flywheel.verifiers.spec import EnvSpec, renderer

HERE = Path(__file__).resolve().parent
PROMPT = "Solve the problem step by step. Put the final answer in \\boxed{}."

SPEC = EnvSpec(
    name="math", system_prompt=PROMPT, verifier=math, verify=math.verify, reward_fn=math.math_reward,
    render=renderer(PROMPT, answer_reference),
    reference_completion=lambda task: f"\\boxed{{{task.reference.answer}}}",
    seeds_path=HERE / "seeds.jsonl", cases_path=HERE / "cases.jsonl",
)
