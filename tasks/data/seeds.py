"""Load seed tasks and tool catalogs, and render a seed into a concrete Task.

Contract: every bad line raises ``SeedError`` naming the file and line number;
rendering is a pure function of (seed, template index, slot values).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flywheel.schemas import SeedTask, Task, TaskMeta, ToolSpec
from flywheel.verifiers import envs
from flywheel.verifiers.envs import env_names, get_env
from flywheel.verifiers.render import fill, format_value, reference_answer  # noqa: F401  (re-exported)

# The default seeds location: each env's own folder (``verifiers/envs/ENV/seeds.jsonl`` and ``tools.json``). Any
# other folder passed as ``seeds_dir`` (``--seeds-dir``) overrides it, holding ENV.jsonl and ENV.tools.json.
SEEDS_DIR = Path(envs.__file__).resolve().parent


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
    env = path.parent.name if path.name == "seeds.jsonl" else path.name.removesuffix(".jsonl")
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.jsonl")) or list(env_names())
        raise SeedError(f"{path}: seed file not found; envs with seeds there: {', '.join(known)}")
    if env not in env_names():
        raise SeedError(f"{path}: no verifier for env {env!r}; seed files are named after one of {list(env_names())}")
    spec = get_env(env)
    seeds: list[SeedTask] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            seed = spec.seed_model.model_validate({**json.loads(line), "env": env})
            spec.check_seed(seed)
        except json.JSONDecodeError as err:
            raise SeedError(f"{path}:{lineno}: not JSON: {err}") from None
        except ValidationError as err:
            raise SeedError(f"{path}:{lineno}: {first_error(err)}") from None
        except ValueError as err:
            raise SeedError(f"{path}:{lineno}: {err}") from None
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


def env_paths(env: str, seeds_dir: Path | str | None = None) -> tuple[Path, Path]:
    """The env's seed file and tool catalog path (the catalog may not exist: envs without tools). ``seeds_dir``
    None or SEEDS_DIR: the env's own folder (from its spec); any other folder: ENV.jsonl and ENV.tools.json there.
    An unknown env gets paths that do not exist, so loading names the file and the known envs."""
    if seeds_dir is not None and Path(seeds_dir).resolve() != SEEDS_DIR:
        return Path(seeds_dir) / f"{env}.jsonl", Path(seeds_dir) / f"{env}.tools.json"
    if env not in env_names():
        return SEEDS_DIR / f"{env}.jsonl", SEEDS_DIR / f"{env}.tools.json"
    spec = get_env(env)
    return spec.seeds_path, spec.tools_path or spec.seeds_path.with_name("tools.json")


def render(seed: SeedTask, tools: dict[str, ToolSpec], request: str, values: dict[str, Any], meta: TaskMeta) -> Task:
    """The env's renderer (``EnvSpec.render``); a reference that cannot be built is a SeedError."""
    try:
        return get_env(seed.env).render(seed, tools, request, values, meta)
    except ValidationError:
        raise
    except ValueError as err:
        raise SeedError(str(err)) from None


def seed_task(seed: SeedTask, tools: dict[str, ToolSpec]) -> Task:
    """The seed's own human example as a Task (the near-dup reference set)."""
    request = seed.templates[0].format(**{k: format_value(v) for k, v in seed.values.items()})
    return render(seed, tools, request, seed.values, TaskMeta(seed_id=seed.id, category=seed.category))
