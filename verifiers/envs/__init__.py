"""Environments: one subpackage per env (``verifiers/envs/NAME/__init__.py`` defines ``SPEC = EnvSpec(...)``).

Contract: :func:`env_names` discovers the subpackages without importing them, so adding an env is adding its
folder (no registration line anywhere); :func:`get_env` imports one lazily and returns its spec.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from flywheel.verifiers.spec import EnvSpec


@cache
def env_names() -> tuple[str, ...]:
    """The envs, sorted: the subpackages of this package (nothing is imported)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and not m.name.startswith("_")))


@cache
def get_env(name: str) -> EnvSpec:
    """The env's spec; ValueError naming the known envs when there is no such env."""
    if name not in env_names():
        raise ValueError(f"unknown env {name!r}; choose one of: {', '.join(env_names())}")
    spec = importlib.import_module(f"{__name__}.{name}").SPEC
    if not isinstance(spec, EnvSpec) or spec.name != name:
        raise ValueError(f"verifiers/envs/{name}: SPEC must be an EnvSpec named {name!r}")
    return spec
