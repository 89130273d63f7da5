"""Entry flows for deploy/prefect.yaml: flat parameters, generated from the config models' fields (name, type,
description), so a person can type them in the Prefect UI or run
``prefect deployment run 'generate-dataset/on-demand' --param seed=7 --param n=200``.

Contract: each entry flow has the same name as the flow its CLI command runs (``generate-dataset``,
``flywheel-run``), builds the typed config (a bad parameter fails the run before any work: a Failed state whose
message is one line naming the parameter, ``config.from_parameters``) and runs that flow's body in this flow run,
so the UI shows one flow with runs from the CLI and from deployments alike. ``train-policy``, ``baseline-eval``
and ``promote`` take their typed configs directly.
Task results persist where ``PREFECT_RESULTS_LOCAL_STORAGE_PATH`` points (deploy/start.sh sets it for the
workers), so a rerun with unchanged parameters is served from the cache.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Optional

from prefect import flow
from prefect.runtime import flow_run
from prefect.states import Failed
from pydantic import BaseModel

from flywheel.flows.config import GenerateConfig, ParameterError, RunConfig, from_parameters
from flywheel.flows.generate import generate_dataset
from flywheel.flows.pipeline import run_pipeline
from flywheel.flows.results import GenerateResult, RunSummary


def scheduled_seed() -> int:
    """A scheduled run without a seed uses its scheduled date (YYYYMMDD): each night new data, a rerun of
    the same night the same data."""
    start = flow_run.scheduled_start_time
    return int(start.strftime("%Y%m%d"))


def entry_flow(fn: Callable[..., Any], name: str, model: type[BaseModel], required: tuple[str, ...] = (),
               **defaults: Any) -> Any:
    """``fn`` (taking ``**params``) as the flow NAME whose parameters are generated from ``model``'s fields: each
    field's name, type and description (the UI's form, read from the docstring's Args); a field the model requires (or
    ``required``) stays required; every other defaults to None, "not given", so the model's default (or a profile's)
    applies, as for an option not given to the CLI; ``defaults``: where a deployment run may leave out what the model
    requires (a value taken from a model, never a literal)."""
    params = []
    for field, info in model.model_fields.items():
        must = (info.is_required() or field in required) and field not in defaults
        params.append(inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[info.annotation],  # noqa: UP045  # ty: ignore[invalid-type-form]
                                        default=inspect.Parameter.empty if must else defaults.get(field)))
    setattr(fn, "__signature__", inspect.Signature(params))  # noqa: B010 (what inspect.signature reads)
    fn.__doc__ = f"{fn.__doc__}\n\nArgs:\n" + "".join(
        f"    {field}: {' '.join((info.description or field.replace('_', ' ')).split())}\n"
        for field, info in model.model_fields.items())
    return flow(name=name, persist_result=True)(fn)


def given(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def generate_entry(**params: Any) -> GenerateResult:
    """Every `flywheel generate` option; a scheduled run without a seed uses its date (``scheduled_seed``)."""
    seed = params.pop("seed", None)
    try:
        config = from_parameters(GenerateConfig, **given(params), seed=scheduled_seed() if seed is None else seed)
    except ParameterError as exc:  # one line in the UI, no traceback; calling the flow raises it
        return Failed(message=str(exc), data=exc)  # ty: ignore[invalid-explicit-return]
    return generate_dataset.fn(config)


def pipeline_entry(**params: Any) -> RunSummary:
    """Every `flywheel run` option. None, as an option not given to `flywheel run`: the value of the --profile preset
    or the env's ``run_defaults`` where they set one, else RunConfig's default."""
    try:
        config = from_parameters(RunConfig, **given(params))
    except ParameterError as exc:
        return Failed(message=str(exc), data=exc)  # ty: ignore[invalid-explicit-return]
    return run_pipeline.fn(config)


# --n: required on the CLI; a deployment run left without it makes `flywheel run`'s dataset size
generate_entry = entry_flow(generate_entry, "generate-dataset", GenerateConfig, n=RunConfig.model_fields["n"].default)
pipeline_entry = entry_flow(pipeline_entry, "flywheel-run", RunConfig, required=("out",))
