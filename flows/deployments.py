"""Entry flows for deploy/prefect.yaml: flat parameters, so a person can type them in the Prefect UI or run
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

from prefect import flow
from prefect.runtime import flow_run
from prefect.states import Failed

from flywheel.flows.config import (
    Curriculum,
    GenerateConfig,
    LoraTargets,
    ParameterError,
    Profile,
    ReplayFocus,
    RunBackend,
    from_parameters,
)
from flywheel.flows.generate import generate_dataset
from flywheel.flows.pipeline import RunConfig, run_pipeline
from flywheel.flows.results import GenerateResult, RunSummary
from flywheel.tasks.training.rewards import RewardKind


def scheduled_seed() -> int:
    """A scheduled run without a seed uses its scheduled date (YYYYMMDD): each night new data, a rerun of
    the same night the same data."""
    start = flow_run.scheduled_start_time
    return int(start.strftime("%Y%m%d"))


@flow(name="generate-dataset", persist_result=True)
def generate_entry(out: str, n: int = 300, seed: int | None = None, env: str = "tool_call", name: str | None = None,
                   workers: int = 2, dask_address: str | None = None, backend: str = "sampler",
                   model: str | None = None, base_url: str | None = None, heldout_fraction: float = 0.2,
                   max_candidates: int | None = None, parents: list[str] | None = None) -> GenerateResult:
    try:
        config = from_parameters(GenerateConfig, out=out, n=n, seed=scheduled_seed() if seed is None else seed,
                                 env=env, name=name, workers=workers, dask_address=dask_address, backend=backend,
                                 model=model, base_url=base_url, heldout_fraction=heldout_fraction,
                                 max_candidates=max_candidates, parents=tuple(parents or ()))
    except ParameterError as exc:  # one line in the UI, no traceback; calling the flow raises it
        return Failed(message=str(exc), data=exc)  # type: ignore[return-value]
    return generate_dataset.fn(config)


@flow(name="flywheel-run", persist_result=True)
def pipeline_entry(out: str, seed: int = 0, env: str = "tool_call", profile: Profile = "default",
                   n: int | None = None, heldout_fraction: float | None = None, eval_limit: int | None = None,
                   sft_steps: int | None = None,
                   sft_batch_size: int | None = None, sft_learning_rate: float | None = None,
                   grpo_steps: int | None = None, grpo_prompts: int | None = None,
                   grpo_learning_rate: float | None = None, num_generations: int | None = None,
                   max_tokens: int | None = None, lora_targets: LoraTargets | None = None,
                   refill: int | None = None, grpo_reward: RewardKind | None = None,
                   grpo_replay: float | None = None, grpo_replay_focus: ReplayFocus | None = None,
                   grpo_replay_rows: int | None = None, check_interval: int | None = None,
                   curriculum_samples: int | None = None, curriculum_tasks: int | None = None,
                   curriculum: Curriculum | None = None, curriculum_balance: bool | None = None,
                   validation_tasks: int | None = None, capability_tasks: int | None = None,
                   capability_envs: list[str] | None = None,
                   train_limit: int | None = None, gpu_pool: str | None = None, dask_address: str | None = None,
                   prefix_cache: bool | None = None, eval_backend: RunBackend | None = None,
                   grpo_rollout_backend: RunBackend | None = None) -> RunSummary:
    """Every `flywheel run` option (a test holds them equal). None, as an option not given to `flywheel run`: the
    value of the --profile preset or the env's ``run_defaults`` where they set one, else RunConfig's default."""
    given = {k: v for k, v in locals().items() if v is not None}
    try:
        config = from_parameters(RunConfig, **given)
    except ParameterError as exc:
        return Failed(message=str(exc), data=exc)  # type: ignore[return-value]
    return run_pipeline.fn(config)
