"""Golden cases of every verifier, checked by one parametrized test (like NeMo Gym's verifier fixtures)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task
from flywheel.verifiers import VERIFIERS, get_verifier
from flywheel.verifiers.envs import env_names, get_env

CASES_DIR = Path(__file__).resolve().parents[2] / "verifiers" / "cases"  # verifiers that are not envs (judge)


def cases_path(name: str) -> Path:
    return get_env(name).cases_path if name in env_names() else CASES_DIR / f"{name}.jsonl"


def load_cases() -> list[tuple[str, dict]]:
    cases = []
    for name in sorted(VERIFIERS):
        for line in cases_path(name).read_text(encoding="utf-8").splitlines():
            case = json.loads(line)
            cases.append(pytest.param(name, case, id=f"{name}:{case['name']}"))
    return cases


@cache
def env_catalog(env: str) -> tuple[dict, list]:
    seeds_path, tools_path = env_paths(env)
    tools = load_tools(tools_path) if tools_path.is_file() else {}
    return tools, load_seeds(seeds_path, tools)


def case_task(case: dict, catalog) -> Task:
    if "task" in case:
        return Task.model_validate(case["task"])
    tools, seeds = env_catalog(case["seed_env"]) if "seed_env" in case else catalog
    task = seed_task(next(s for s in seeds if s.id == case["seed"]), tools)
    if "task_update" in case:
        task = Task.model_validate({**task.model_dump(), "id": "", **case["task_update"]})
    return task


@pytest.mark.parametrize(("verifier", "case"), load_cases())
def test_golden_case(verifier: str, case: dict, catalog) -> None:
    module = get_verifier(verifier)
    task = case_task(case, catalog)
    if verifier == "judge":  # the judge model's reply is part of the case; the endpoint is tested in test_judge.py
        verdicts = [module.verdict_from_reply(case["judge_reply"], case.get("judge_error", ""))
                    for _ in range(case.get("repeat", 1))]
    else:
        verdicts = [module.verify(task, case["completion"]) for _ in range(case.get("repeat", 1))]
    first = verdicts[0]
    expect = case["expect"]
    assert all(v == first for v in verdicts), "same input must give the same verdict"
    assert first.valid is expect["valid"], first.details
    assert first.failure_class == expect["failure_class"], first.details
    if expect["reward"] is None:
        assert first.reward is None
    else:
        assert first.reward == pytest.approx(expect["reward"], abs=1e-4), first.details
    assert first.verifier == verifier and first.verifier_version


def test_case_files_cover_every_kind() -> None:
    for name in VERIFIERS:
        names = [json.loads(line)["name"] for line in cases_path(name).read_text().splitlines()]
        for kind in ("full", "partial", "zero", "malformed", "hack", "determinism", "verifier error"):
            assert any(n.startswith(kind) for n in names), f"{name} has no {kind!r} golden case"


def test_trl_reward_function_form(catalog) -> None:
    from flywheel.verifiers.envs.tool_call.tool_call import tool_call_reward

    tools, seeds = catalog
    task = seed_task(seeds[0], tools)
    call = task.reference.calls[0]
    good = json.dumps({"tool": call.tool, "args": call.args})
    other_env = Task.model_validate({**task.model_dump(), "id": "", "env": "math"})
    rewards = tool_call_reward(
        completions=[good, "not json", [{"role": "assistant", "content": good}], good],
        task=[task.model_dump_json(), task.model_dump(), task, other_env],
        prompts=["p"] * 4,
    )
    assert rewards == [1.0, -1.0, 1.0, None]


def test_cli_reward_function_form() -> None:
    from flywheel.verifiers.envs.cli.cli import cli_reward

    task = Task.model_validate({"env": "cli", "messages": [{"role": "user", "content": "List /tmp."}],
                                "reference": {"answer": "ls /tmp"}, "meta": {"seed_id": "t"}})
    other = Task.model_validate({**task.model_dump(), "id": "", "env": "tool_call"})
    assert cli_reward(["ls /tmp", "rm -rf /", "ls /tmp"],
                      task=[task, task.model_dump_json(), other]) == [1.0, -1.0, None]


@pytest.mark.parametrize("name", sorted(VERIFIERS))
def test_every_verifier_has_both_forms(name: str) -> None:
    import inspect

    module = get_verifier(name)
    assert module.NAME == name and module.VERSION
    reward_fn = getattr(module, f"{name}_reward")
    assert list(inspect.signature(reward_fn).parameters)[:2] == ["completions", "task"]
    assert list(inspect.signature(module.verify).parameters) == ["task", "completion"]
