"""What the config models share: value types, bounds, help texts, the checks of a URL and a --parent, and one line
for a bad deployment parameter (``from_parameters``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

Backend = Literal["sampler", "transformers", "vllm", "openai"]
# flywheel run's choices, one definition for RunConfig and the flywheel-run deployment's parameters
Profile = str  # "default", a profile in flows/profiles/ ("full") or the path of a YAML file shaped like one
LoraTargets = Literal["attention", "all-linear"]
Curriculum = Literal["mixed", "failures", "both"]
ReplayFocus = Literal["all", "tools"]
RunBackend = Literal["auto", "transformers", "vllm"]
ConfigT = TypeVar("ConfigT", bound=BaseModel)
MAX_ROWS = 10_000_000  # generate --n: 100x the 100k-row bench flow
BACKEND_HELP = ("auto: vllm when it is installed (.venv-vllm or importable) and the eval has at least 100 rollouts, "
                "else transformers | transformers | vllm (an adapter is served merged into its base) | openai")
PREFIX_CACHE_HELP = ("transformers backend: prefill a prompt prefix shared by several requests once and reuse its KV "
                     "cache (and an agent's from step to step); GRPO's updates run the prompt prefix a pass shares "
                     "once; --no-prefix-cache prefills every prompt whole (the old paths, for comparison).")


def no_credentials(url: str | None) -> str | None:
    """``url`` when it holds no user or password: the URL is recorded in manifests and eval reports (and shown in
    the UI's artifacts); the key goes in $OPENAI_API_KEY."""
    parts = urlsplit(url or "")
    if parts.username is not None or parts.password is not None:
        raise ValueError("--base-url must not hold a user or password (it is written into manifests and reports): "
                         "pass the key as $OPENAI_API_KEY")
    return url


def check_parent(folder: str, env: str) -> None:
    """A --parent must be a published version of ``env`` that passes ``check_version`` (files against its manifest,
    the manifest against its folder, every row's id, env, prompt and task JSON; prompts at most dedupe's cap)."""
    from flywheel.tasks.data.publish import check_version

    try:
        manifest = check_version(Path(folder))
    except (ValueError, OSError) as exc:
        raise ValueError(f"--parent {folder}: {' '.join(str(exc).split())}") from None
    if manifest.env != env:
        raise ValueError(f"--parent {folder} is a {manifest.env} dataset, not {env}: dedupe against versions of the "
                         f"--env generated ({env})")


class ParameterError(ValueError):
    """A deployment run's parameter failed its config's validation; the message, one line, names it."""


def parameter_error(exc: ValidationError) -> str:
    """One line for a config's ValidationError: the parameter, pydantic's message and the value given (a model
    validator's message names its options itself), never pydantic's multi-line dump with a docs link."""
    errors = exc.errors()
    e, more = errors[0], f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    msg = " ".join(str(e["msg"]).removeprefix("Value error, ").split())
    if not e["loc"]:
        return f"{msg}{more}: change the run's parameters"
    got = "" if isinstance(e.get("input"), dict) else f", got {' '.join(repr(e.get('input'))[:80].split())}"
    return f"parameter {'.'.join(map(str, e['loc']))}: {msg}{got}{more}: change it in the run's parameters"


def from_parameters(model: type[ConfigT], /, **params: Any) -> ConfigT:
    """``model(**params)`` for a deployment entry flow (flows/deployments.py): the Prefect UI's Run and schedules
    skip the CLI, whose ``explain`` makes a ValidationError one line; here it is a ParameterError of one line."""
    try:
        return model(**params)
    except ValidationError as exc:
        raise ParameterError(parameter_error(exc)) from None


def rows_per_tool(heldout_fraction: float) -> int:
    """The fewest rows a tool needs for the split to hold one of them out (``tasks/data/split.py``: a tool's groups
    go to held-out while they fill at most its share, a row counting from half of it, and its last group stays in
    train)."""
    return max(2, math.ceil(0.5 / heldout_fraction - 1e-9))


def heldout_advice(rows: int, heldout_fraction: float) -> str:
    return (f"{rows} rows at --heldout-fraction {heldout_fraction:g} (the split holds rows out per tool, and a tool "
            f"needs at least {rows_per_tool(heldout_fraction)} rows for one to be held out): raise --n or "
            "--heldout-fraction")
