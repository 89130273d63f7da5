"""Load seed tasks and tool catalogs, and render a seed into a concrete Task.

Contract: every bad line raises ``SeedError`` naming the file and line number;
rendering is a pure function of (seed, template index, slot values).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schemas import Message, Reference, SeedTask, Task, TaskMeta, ToolCall, ToolSpec

SEEDS_DIR = Path(__file__).resolve().parents[1] / "datasets" / "seeds"
SYSTEM_PROMPTS = {
    "tool_call": "You are a workplace assistant. Answer with exactly one JSON object of the form "
                 '{"tool": "<tool name>", "args": {...}} that calls one of the available tools. No other text.',
    "math": "Solve the problem step by step. Put the final answer in \\boxed{}.",
    "cli": "You are a shell assistant. Answer with exactly one shell command on one line and nothing else.",
}


class SeedError(ValueError):
    """A seed or tool catalog file is malformed; the message names file and line."""


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    where = ".".join(map(str, e["loc"])) or "<record>"
    return f"{where}: {e['msg']}"


def load_tools(path: Path) -> dict[str, ToolSpec]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        tools = [ToolSpec.model_validate(t) for t in raw]
    except (OSError, json.JSONDecodeError) as err:
        raise SeedError(f"{path}: cannot read tool catalog: {err}") from None
    except ValidationError as err:
        raise SeedError(f"{path}: bad tool spec: {_first_error(err)}") from None
    return {t.name: t for t in tools}


def load_seeds(path: Path, tools: dict[str, ToolSpec]) -> list[SeedTask]:
    """Parse a seed JSONL file (its name gives the env); unknown tools and duplicate ids are errors too."""
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.jsonl"))
        raise SeedError(f"{path}: seed file not found; envs with seeds there: {', '.join(known)}")
    env = path.name.removesuffix(".jsonl")
    if env not in SYSTEM_PROMPTS:
        raise SeedError(f"{path}: no verifier for env {env!r}; seed files are named after one of {sorted(SYSTEM_PROMPTS)}")
    seeds: list[SeedTask] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            seed = SeedTask.model_validate({**json.loads(line), "env": env})
            if (seed.call is None) != (env != "tool_call"):
                raise SeedError(f"{path}:{lineno}: {env} seeds need {'a call' if env == 'tool_call' else 'an answer'}")
        except json.JSONDecodeError as err:
            raise SeedError(f"{path}:{lineno}: not JSON: {err}") from None
        except ValidationError as err:
            raise SeedError(f"{path}:{lineno}: {_first_error(err)}") from None
        missing = [t for t in seed.tools if t not in tools]
        if missing:
            raise SeedError(f"{path}:{lineno}: tools {missing} are not in the tool catalog")
        if seed.id in seen:
            raise SeedError(f"{path}:{lineno}: duplicate seed id {seed.id!r}")
        seen.add(seed.id)
        seeds.append(seed)
    if not seeds:
        raise SeedError(f"{path}: no seed tasks")
    return seeds


def env_paths(env: str, seeds_dir: Path = SEEDS_DIR) -> tuple[Path, Path]:
    return seeds_dir / f"{env}.jsonl", seeds_dir / f"{env}.tools.json"


def format_value(value: Any) -> str:
    """How a slot value reads in a request (floats keep two decimals)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.2f}"
    return str(value)


def fill(value: Any, values: dict[str, Any]) -> Any:
    """Substitute slots into a reference argument, keeping a lone slot's type."""
    if isinstance(value, str):
        if value.startswith("{") and value.endswith("}") and value[1:-1] in values:
            return values[value[1:-1]]
        return value.format(**{k: format_value(v) for k, v in values.items()})
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, values) for k, v in value.items()}
    return value


def reference_answer(seed: SeedTask, values: dict[str, Any]) -> str:
    """The seed's answer template filled in; math expressions are evaluated exactly (our own numbers only)."""
    text = (seed.answer or "").format(**{k: format_value(v) for k, v in values.items()})
    if not seed.evaluate:
        return text
    import sympy

    return str(sympy.nsimplify(sympy.sympify(text, rational=True)))


def render(seed: SeedTask, tools: dict[str, ToolSpec], request: str, values: dict[str, Any], meta: TaskMeta) -> Task:
    messages = (Message(role="system", content=SYSTEM_PROMPTS[seed.env]), Message(role="user", content=request))
    if seed.call is not None:
        reference = Reference(calls=(ToolCall(tool=seed.call.tool, args=fill(seed.call.args, values)),))
    else:
        reference = Reference(answer=reference_answer(seed, values))
    return Task(env=seed.env, messages=messages, tools=tuple(tools[name] for name in seed.tools),
                reference=reference, meta=meta)


def seed_task(seed: SeedTask, tools: dict[str, ToolSpec]) -> Task:
    """The seed's own human example as a Task (the near-dup reference set)."""
    request = seed.templates[0].format(**{k: format_value(v) for k, v in seed.values.items()})
    return render(seed, tools, request, seed.values, TaskMeta(seed_id=seed.id, category=seed.category))
