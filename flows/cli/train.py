"""Training commands: ``train`` (one LoRA adapter, evaluated and registered) and ``run`` (the whole loop)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from flywheel.flows.cli.base import (
    app,
    check_output,
    err,
    explain,
    fail,
    in_api,
    model_options,
    option,
    with_parameters,
    with_progress,
)
from flywheel.flows.config import RunConfig  # light: pydantic only (no Prefect, no TRL)
from flywheel.tasks.training.train import TrainConfig  # light: pydantic and the env registry (no TRL)


@app.command()
def train(
    dataset: Path = option(TrainConfig, "dataset"),
    out: Path = option(TrainConfig, "out"),
    method: str = option(TrainConfig, "method"),
    model: str = option(TrainConfig, "model"),
    skip_tasks: Path = option(TrainConfig, "skip_tasks"),
    train_on: str = option(TrainConfig, "train_on"),
    train_limit: int = option(TrainConfig, "train_limit"),
    steps: int = option(TrainConfig, "steps"),
    batch_size: int = option(TrainConfig, "batch_size"),
    micro_batch: int = option(TrainConfig, "micro_batch"),
    learning_rate: float = option(TrainConfig, "learning_rate"),
    lora_r: int = option(TrainConfig, "lora_r"),
    lora_targets: str = option(TrainConfig, "lora_targets"),
    num_generations: int = option(TrainConfig, "num_generations"),
    loss_type: str = option(TrainConfig, "loss_type"),
    beta: float = option(TrainConfig, "beta"),
    scale_rewards: str = option(TrainConfig, "scale_rewards"),
    refill: int = option(TrainConfig, "refill"),
    reward: str = option(TrainConfig, "reward"),
    replay_weight: float = option(TrainConfig, "replay_weight"),
    replay_rows: int = option(TrainConfig, "replay_rows"),
    replay_focus: str = option(TrainConfig, "replay_focus"),
    rollout_backend: str = option(TrainConfig, "rollout_backend"),
    max_tokens: int = option(TrainConfig, "max_tokens"),
    check_interval: int = option(TrainConfig, "check_interval"),
    validation_tasks: int = option(TrainConfig, "validation_tasks"),
    eval_limit: int = option(TrainConfig, "eval_limit"),
    save_steps: int = option(TrainConfig, "save_steps"),
    seed: int = option(TrainConfig, "seed"),
    registry: Path = typer.Option(None, envvar="FLYWHEEL_REGISTRY",
                                  help="Register the adapter here as the candidate."),
    parent: str = typer.Option(None, help="Registry version the --model adapter came from (lineage)."),
    prefix_cache: bool = option(TrainConfig, "prefix_cache"),
) -> None:
    """Train a LoRA adapter with TRL (SFT or GRPO), evaluate it on held-out tasks, register it as the candidate."""
    given = dict(locals())  # first: every option's value, nothing else yet
    from flywheel.flows.config import EvalConfig
    from flywheel.tasks.inference.models import check_model, resolve_model
    from flywheel.tasks.training.train import check_claim, check_train_paths

    try:
        config = TrainConfig.model_validate({k: str(v) if isinstance(v, Path) else v for k, v in given.items()
                                             if k in TrainConfig.model_fields} | {"lora_alpha": 2 * lora_r})
        start = resolve_model(model)  # a bad --model fails before any flow run starts
        evaluation = EvalConfig(dataset=str(dataset), out=str(out / "eval"), limit=eval_limit, seed=seed,
                                max_tokens=max_tokens, prefix_cache=prefix_cache)
        check_output(out, "--out", folder_wanted=True)
        if registry:
            check_output(registry, "--registry", folder_wanted=True, registry_ok=True)
        check_train_paths(out, start, registry, parent)  # train_policy runs it again (a deployment skips the CLI)
        check_model(model)  # a crafted adapter or base: one line naming the file, before the flow loads it
        check_claim(out, config)  # OUT holding another run's options: found now, not inside the flow
        from flywheel.flows.train import train_policy  # TRL and the eval flow: imported once every check has passed

        summary = in_api(lambda: train_policy(config, evaluation, str(registry) if registry else None, parent))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(explain(exc))
    success = summary.metrics.get("success_rate")
    value, lo, hi = (success.value, success.lo, success.hi) if success else (None, None, None)
    done = sum(r["step"] > 0 for r in summary.history)  # step 0: the start policy's validation check
    err.print(f"trained {done} steps in {summary.train_s:.0f} s; held-out success "
              f"{value} [{lo}, {hi}]; eval {summary.eval}", highlight=False)
    if summary.version:
        err.print(f"registered {summary.version} as candidate in {registry}", highlight=False)
    typer.echo(summary.adapter)


@app.command("run")
@with_parameters(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context),
                 *model_options(RunConfig, {"capability_envs": ("--capability-env",)},
                                capability_envs={"metavar": "ENV"}))
def run_(ctx: typer.Context, **values: Any) -> None:
    """The whole loop on embedded defaults: dataset, baseline eval, SFT if needed, GRPO, eval, gate, promote."""
    from flywheel.flows.pipeline import check_run_claim, run_pipeline

    # only the options given: the rest come from the --profile preset, then from RunConfig's defaults (typer's
    # vendored click has its own ParameterSource enum: compare by name)
    given = {k: str(v) if isinstance(v, Path) else v for k, v in values.items()
             if getattr(ctx.get_parameter_source(k), "name", "") in ("COMMANDLINE", "ENVIRONMENT")}
    try:
        config = RunConfig.model_validate(given)
        out = Path(config.out)
        check_output(out, "--out", folder_wanted=True)  # a file, a published version, a registry: refused now
        check_run_claim(config)  # an OUT of a run with other options too
        summary = with_progress(lambda: run_pipeline(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(explain(exc))
    err.print(f"dataset   {summary.dataset}", highlight=False)
    for name, e in summary.evals.items():
        err.print(f"eval      {name}: {e.report}", highlight=False)
    for name, s in summary.stages.items():
        err.print(f"{name:<9} adapter {s.adapter} -> registry version {s.version}", highlight=False)
    err.print(f"registry  {summary.registry} (flywheel registry show production --registry ...)", highlight=False)
    typer.echo((out / "summary.md").read_text(encoding="utf-8"))
    if not summary.gate.passed:
        fail("the gate rejected the trained model: production was not moved (the failed checks are listed above)")

