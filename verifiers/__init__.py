"""Verifiers: reward functions in TRL's form plus ``verify(task, completion) -> Verdict``.

Each env's verifier lives in its folder under ``verifiers/envs/`` (see ``verifiers/spec.py``); ``judge`` is a
verifier that is not an env. Names map to verifier modules only here, at the edge (CLI, deployment YAML).
"""

from __future__ import annotations

from types import ModuleType

from flywheel.verifiers.envs import env_names, get_env


def verifier_names() -> tuple[str, ...]:
    """Every verifier name: the envs, plus ``judge``."""
    return (*env_names(), "judge")


VERIFIERS = verifier_names()


def get_verifier(name: str) -> ModuleType:
    """The verifier module (``NAME``, ``VERSION``, ``verify``, ``NAME_reward``); imported on first use."""
    if name == "judge":
        from flywheel.verifiers import judge

        return judge
    if name not in env_names():
        raise ValueError(f"unknown verifier {name!r}; choose one of: {', '.join(sorted(verifier_names()))}")
    return get_env(name).verifier
