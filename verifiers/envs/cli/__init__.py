"""The cli env: one shell command compared with the reference command."""

from __future__ import annotations

from pathlib import Path

from flywheel.verifiers.envs.cli import cli
from flywheel.verifiers.render import answer_reference
from flywheel.verifiers.spec import EnvSpec, renderer

HERE = Path(__file__).resolve().parent
PROMPT = "You are a shell assistant. Answer with exactly one shell command on one line and nothing else."

SPEC = EnvSpec(
    name="cli", system_prompt=PROMPT, verifier=cli, verify=cli.verify, reward_fn=cli.cli_reward,
    render=renderer(PROMPT, answer_reference), reference_completion=lambda task: task.reference.answer or "",
    seeds_path=HERE / "seeds.jsonl", cases_path=HERE / "cases.jsonl",
)
