"""The env contract: envs are discovered from their folders, each spec's golden cases pass through
``spec.verify``, and no module outside ``verifiers/envs/`` branches on an env name."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.seeds import load_seeds, load_tools, seed_task
from flywheel.verifiers.envs import env_names, get_env
from flywheel.verifiers.spec import EnvSpec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"tool_call", "math", "cli", "code", "workplace", "sql"}


def test_env_names_are_discovered_without_importing_any_env() -> None:
    code = ("import sys; from flywheel.verifiers.envs import env_names; names = env_names(); "
            "print(names); print([m for m in sys.modules if m.startswith('flywheel.verifiers.envs.')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert SHIPPED <= set(eval(out[0])) and eval(out[1]) == []  # noqa: S307 - our own printed literals
    assert env_names() == tuple(sorted(env_names()))


def test_get_env_names_the_choices_for_an_unknown_env() -> None:
    with pytest.raises(ValueError, match=r"unknown env 'chess'; choose one of: .*tool_call"):
        get_env("chess")
    with pytest.raises(ValueError, match="unknown env"):
        get_env("..")  # a path, not an env: nothing is imported


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_spec_shape_and_paths(name: str) -> None:
    spec = get_env(name)
    assert isinstance(spec, EnvSpec) and spec.name == name and spec.verifier.NAME == name
    assert spec.seeds_path.is_file() and spec.cases_path.is_file()
    assert spec.seeds_path.parent == spec.cases_path.parent == ROOT / "verifiers" / "envs" / name
    assert spec.tools_path is None or spec.tools_path.is_file()
    assert spec.system_prompt and spec.multi_turn is (name == "workplace")


def _cases(name: str) -> list[dict]:
    return [json.loads(line) for line in get_env(name).cases_path.read_text(encoding="utf-8").splitlines() if line]


def _catalog(env: str) -> tuple[dict, dict]:
    spec = get_env(env)
    tools = load_tools(spec.tools_path) if spec.tools_path else {}
    return tools, {s.id: s for s in load_seeds(spec.seeds_path, tools)}


@pytest.mark.parametrize("name", env_names())
def test_every_golden_case_passes_through_spec_verify(name: str) -> None:
    spec, catalogs = get_env(name), {}
    cases = _cases(name)
    assert cases, f"{name} has no golden cases"
    for case in cases:
        if "task" in case:
            task = Task.model_validate(case["task"])
        else:
            env = case.get("seed_env", name)
            tools, seeds = catalogs.setdefault(env, _catalog(env))
            task = seed_task(seeds[case["seed"]], tools)
            if "task_update" in case:
                task = Task.model_validate({**task.model_dump(), "id": "", **case["task_update"]})
        verdict = spec.verify(task, case["completion"])
        expect = case["expect"]
        assert (verdict.valid, verdict.failure_class) == (expect["valid"], expect["failure_class"]), case["name"]
        assert verdict.reward == (None if expect["reward"] is None else pytest.approx(expect["reward"], abs=1e-4)), \
            case["name"]


def _env_literal(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_env_literal(e, names) for e in node.elts)
    return False


def env_branches(source: str, names: set[str]) -> list[int]:
    """Lines that compare with, or test membership in, an env-name string literal (or a literal container of them),
    and module-level containers of env names (the ``MULTI_TURN = {"workplace"}`` kind)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_env_literal(n, names) for n in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)) \
                and _env_literal(node.value, names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and sum(_env_literal(k, names) for k in node.keys if k) >= 2:
            lines.append(node.lineno)  # a table keyed by env names (the SYSTEM_PROMPTS kind)
    return sorted(set(lines))


def test_the_scan_finds_env_branches() -> None:
    names = set(env_names())
    src = ('if env == "tool_call": pass\nok = t.env in ("math", "cli")\n'
           'MULTI = {"workplace"}\nP = {"math": 1, "cli": 2}\n')
    assert env_branches(src, names) == [1, 2, 3, 4]
    assert env_branches('def f(env="tool_call"): return {"code": 1}\n', names) == []  # defaults are fine


def test_no_module_outside_the_envs_branches_on_an_env_name() -> None:
    names = set(env_names())
    found = {}
    for folder in ("flows", "tasks", "schemas", "verifiers"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if (ROOT / "verifiers" / "envs") in path.parents:
                continue
            lines = env_branches(path.read_text(encoding="utf-8"), names)
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}, f"ask the env's spec (flywheel.verifiers.envs.get_env) instead: {found}"


def test_versions_say_what_changed() -> None:
    from flywheel.verifiers.envs.cli import cli
    from flywheel.verifiers.envs.tool_call import tool_call
    from flywheel.verifiers.envs.workplace import workplace

    assert (tool_call.VERSION, workplace.VERSION, cli.VERSION) == ("1.5.0", "1.4.0", "1.6.0")
