"""Load seed tasks and tool catalogs, and render a seed into a concrete Task.

Contract: every bad line raises ``SeedError`` naming the file and line number;
rendering is a pure function of (seed, template index, slot values).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flywheel.schemas import CodeTest, Message, Reference, SeedTask, Task, TaskMeta, ToolCall, ToolSpec

SEEDS_DIR = Path(__file__).resolve().parents[2] / "datasets" / "seeds"
SYSTEM_PROMPTS = {
    "tool_call": "You are a workplace assistant. Answer with exactly one JSON object of the form "
                 '{"tool": "<tool name>", "args": {...}} that calls one of the available tools. No other text.',
    "math": "Solve the problem step by step. Put the final answer in \\boxed{}.",
    "cli": "You are a shell assistant. Answer with exactly one shell command on one line and nothing else.",
    "code": "Write the Python function the user asks for. Answer with one ```python code block that defines it; "
            "use only the standard library.",
    "workplace": "You are a workplace assistant with access to the company's mail, calendar, projects and CRM "
                 "through tools. Look up what you need, make the requested changes with tool calls, then reply "
                 "with a one-line plain-text summary. Never delete or cancel anything you were not asked to.",
}


class SeedError(ValueError):
    """A seed or tool catalog file is malformed; the message names file and line."""


def first_error(err: ValidationError) -> str:
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
        raise SeedError(f"{path}: bad tool spec: {first_error(err)}") from None
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
        except json.JSONDecodeError as err:
            raise SeedError(f"{path}:{lineno}: not JSON: {err}") from None
        except ValidationError as err:
            raise SeedError(f"{path}:{lineno}: {first_error(err)}") from None
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
    if isinstance(value, dict):  # keys too: workplace state tables are keyed by templated record ids
        return {fill(k, values): fill(v, values) for k, v in value.items()}
    return value


def reference_answer(seed: SeedTask, values: dict[str, Any]) -> str:
    """The seed's answer template filled in; math expressions are evaluated exactly (our own numbers only)."""
    text = (seed.answer or "").format(**{k: format_value(v) for k, v in values.items()})
    if not seed.evaluate:
        return text
    import sympy

    return str(sympy.nsimplify(sympy.sympify(text, rational=True)))


def reference_outputs(solution: str, entry_point: str, inputs: list[list[Any]]) -> list[CodeTest]:
    """Expected outputs of a code seed, from its reference solution (seed files are trusted code, like
    the project's own; candidates' code only ever runs in the sandbox)."""
    namespace: dict[str, Any] = {"__name__": "__seed__"}
    exec(compile(solution, f"<seed solution {entry_point}>", "exec"), namespace)  # noqa: S102 - trusted seed code
    fn = namespace[entry_point]
    return [CodeTest(args=tuple(args), expected=json.loads(json.dumps(fn(*copy.deepcopy(args))))) for args in inputs]


def _reference(seed: SeedTask, tools: dict[str, ToolSpec], values: dict[str, Any]) -> Reference:
    if seed.env == "tool_call" and seed.call is not None:  # SeedTask's per-env check guarantees the call
        return Reference(calls=(ToolCall(tool=seed.call.tool, args=fill(seed.call.args, values)),))
    if seed.env == "code":
        solution, entry = reference_answer(seed, values), fill(seed.entry_point, values)
        return Reference(answer=solution, entry_point=entry,
                         tests=tuple(reference_outputs(solution, entry, [fill(list(i), values) for i in seed.inputs])))
    if seed.env == "workplace":
        from flywheel.verifiers.workplace import Session

        calls = tuple(ToolCall(tool=c.tool, args=fill(c.args, values)) for c in seed.calls)
        probe = Task(env="workplace", messages=(Message(role="user", content="-"),), tools=tuple(tools[n] for n in seed.tools),
                     reference=Reference(calls=calls, state=fill(seed.state, values)), meta=TaskMeta(seed_id=seed.id))
        session = Session.seeded(probe)
        for call in calls:
            observation = session.call(call.tool, call.args)
            if "error" in observation:
                raise SeedError(f"seed {seed.id}: reference call {call.tool} fails: {observation['error']}")
        return probe.reference.model_copy(update={"final_state": session.state})
    return Reference(answer=reference_answer(seed, values))


def render(seed: SeedTask, tools: dict[str, ToolSpec], request: str, values: dict[str, Any], meta: TaskMeta) -> Task:
    messages = (Message(role="system", content=SYSTEM_PROMPTS[seed.env]), Message(role="user", content=request))
    return Task(env=seed.env, messages=messages, tools=tuple(tools[name] for name in seed.tools),
                reference=_reference(seed, tools, values), meta=meta)


def seed_task(seed: SeedTask, tools: dict[str, ToolSpec]) -> Task:
    """The seed's own human example as a Task (the near-dup reference set)."""
    request = seed.templates[0].format(**{k: format_value(v) for k, v in seed.values.items()})
    return render(seed, tools, request, seed.values, TaskMeta(seed_id=seed.id, category=seed.category))
