"""Training commands: ``train`` (one LoRA adapter, evaluated and registered) and ``run`` (the whole loop)."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from flywheel.flows.cli.base import app, check_output, err, explain, fail, in_api, option, with_progress
from flywheel.flows.config import RunConfig  # light: pydantic only (no Prefect, no TRL)
from flywheel.tasks.training.replay import FOCUS_HELP, REPLAY_HELP
from flywheel.tasks.training.rewards import REWARD_HELP
from flywheel.tasks.training.train import SCALE_HELP, TRAIN_ON_HELP
from flywheel.tasks.training.vllm_rollout import ROLLOUT_HELP


@app.command()
def train(
    dataset: Path = typer.Option(..., help="A published dataset version folder (OUT/NAME/VERSION)."),
    out: Path = typer.Option(..., help="Output folder: adapter/, checkpoints/, metrics.jsonl, train_log.json, eval/."),
    method: str = typer.Option("grpo", help="sft (reference answers) | grpo (verifier rewards)."),
    model: str = typer.Option(None, help="Base checkpoint, or a PEFT adapter to keep training (e.g. the SFT adapter); "
                                         "default: the embedded model."),
    skip_tasks: Path = typer.Option(None, help="per_task.parquet of `flywheel eval --split train --samples K`: "
                                               "tasks always or never solved are left out."),
    train_on: str = typer.Option("mixed", help=TRAIN_ON_HELP),
    limit: int = typer.Option(None, help="Train on the first N train tasks (ordered by id)."),
    max_steps: int = typer.Option(20, help="Optimizer steps."),
    batch_size: int = typer.Option(8, help="SFT: rows per step; GRPO: completions per step (a multiple of "
                                           "--num-generations)."),
    micro_batch: int = typer.Option(None, help="Rows per forward/backward pass; each step accumulates the gradients "
                                               "of --batch-size / N passes (default: the whole batch at once). Bounds "
                                               "memory on long multi-turn episodes."),
    learning_rate: float = typer.Option(1e-4, help="Learning rate."),
    lora_r: int = typer.Option(16, help="LoRA rank."),
    lora_targets: str = typer.Option("attention", help="LoRA on the attention projections (attention) or on every "
                                                      "linear layer, MLP included (all-linear)."),
    num_generations: int = typer.Option(8, help="GRPO: completions per prompt."),
    loss_type: str = typer.Option("dapo", help="GRPO loss: grpo | dapo | dr_grpo | gspo (sequence-level IS)."),
    beta: float = typer.Option(0.0, help="GRPO: KL coefficient (0: no reference pass). From an adapter (--model), "
                                         "the KL anchors on that adapter's policy, not the base model."),
    scale_rewards: str = typer.Option("group", help=SCALE_HELP),
    refill: int = typer.Option(2, help="GRPO online filtering: a group whose G rewards are all equal carries no "
                                       "signal and is replaced by a fresh task's group, up to N times (0: kept)."),
    reward: str = typer.Option("verifier", help=REWARD_HELP),
    replay_weight: float = typer.Option(0.0, help=REPLAY_HELP),
    replay_rows: int = typer.Option(16, help="GRPO replay: reference answers per step."),
    replay_focus: str = typer.Option("all", help=FOCUS_HELP),
    rollout_backend: str = typer.Option("transformers", help=ROLLOUT_HELP),
    max_completion_length: int = typer.Option(64, help="Max new tokens per completion (and in held-out checks)."),
    eval_interval: int = typer.Option(10, help="Held-out (or --validation) reward and success every N steps."),
    validation: int = typer.Option(0, help="Hold the last N train tasks apart (never trained on): the periodic checks "
                                           "run on them and the best checkpoint by their success is the adapter; 0: "
                                           "checks on the held-out tasks, the last checkpoint kept."),
    eval_limit: int = typer.Option(32, help="Held-out tasks in the periodic checks and the final eval."),
    save_steps: int = typer.Option(10, help="Checkpoint every N steps (a killed run resumes from the last one)."),
    seed: int = typer.Option(0, help="Training and rollout seed."),
    registry: Path = typer.Option(None, envvar="FLYWHEEL_REGISTRY",
                                  help="Register the adapter here as the candidate."),
    parent: str = typer.Option(None, help="Registry version the --model adapter came from (lineage)."),
    prefix_cache: bool = typer.Option(True, help="GRPO rollouts and evals: prefill each prompt once and reuse its KV "
                                                 "cache (--no-prefix-cache: the old path)."),
) -> None:
    """Train a LoRA adapter with TRL (SFT or GRPO), evaluate it on held-out tasks, register it as the candidate."""
    from flywheel.flows.config import EvalConfig
    from flywheel.tasks.inference.models import check_model, resolve_model
    from flywheel.tasks.training.train import TrainConfig, check_claim, check_train_paths

    try:
        config = TrainConfig(dataset=str(dataset), out=str(out), method=method, model=model, limit=limit,
                             skip_tasks=str(skip_tasks) if skip_tasks else None, train_on=train_on,
                             max_steps=max_steps,
                             batch_size=batch_size, micro_batch=micro_batch, learning_rate=learning_rate,
                             lora_r=lora_r, lora_alpha=2 * lora_r,
                             lora_targets=lora_targets,
                             num_generations=num_generations, loss_type=loss_type, beta=beta, refill=refill,
                             scale_rewards=scale_rewards, reward=reward, replay_weight=replay_weight,
                             replay_rows=replay_rows, replay_focus=replay_focus,
                             rollout_backend=rollout_backend, validation=validation,
                             max_completion_length=max_completion_length, eval_interval=eval_interval,
                             eval_limit=eval_limit, save_steps=save_steps, seed=seed, prefix_cache=prefix_cache)
        start = resolve_model(model)  # a bad --model fails before any flow run starts
        evaluation = EvalConfig(dataset=str(dataset), out=str(out / "eval"), limit=eval_limit, seed=seed,
                                max_tokens=max_completion_length, prefix_cache=prefix_cache)
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
    steps = sum(r["step"] > 0 for r in summary.history)  # step 0: the start policy's validation check
    err.print(f"trained {steps} steps in {summary.train_s:.0f} s; held-out success "
              f"{value} [{lo}, {hi}]; eval {summary.eval}", highlight=False)
    if summary.version:
        err.print(f"registered {summary.version} as candidate in {registry}", highlight=False)
    typer.echo(summary.adapter)


@app.command("run")
def run_(
    ctx: typer.Context,
    profile: str = option(RunConfig, "profile"),
    out: Path = option(RunConfig, "out"),
    seed: int = option(RunConfig, "seed"),
    env: str = option(RunConfig, "env"),
    n: int = option(RunConfig, "n", "--n"),
    heldout_fraction: float = option(RunConfig, "heldout_fraction"),
    eval_limit: int = option(RunConfig, "eval_limit"),
    sft_steps: int = option(RunConfig, "sft_steps"),
    grpo_steps: int = option(RunConfig, "grpo_steps"),
    sft_batch_size: int = option(RunConfig, "sft_batch_size"),
    sft_learning_rate: float = option(RunConfig, "sft_learning_rate"),
    grpo_learning_rate: float = option(RunConfig, "grpo_learning_rate"),
    num_generations: int = option(RunConfig, "num_generations"),
    refill: int = option(RunConfig, "refill"),
    grpo_reward: str = option(RunConfig, "grpo_reward"),
    grpo_replay: float = option(RunConfig, "grpo_replay"),
    grpo_replay_focus: str = option(RunConfig, "grpo_replay_focus"),
    grpo_replay_rows: int = option(RunConfig, "grpo_replay_rows"),
    check_interval: int = option(RunConfig, "check_interval"),
    validation_tasks: int = option(RunConfig, "validation_tasks"),
    capability_tasks: int = option(RunConfig, "capability_tasks"),
    capability_envs: list[str] = option(RunConfig, "capability_envs", "--capability-env", metavar="ENV"),
    curriculum_samples: int = option(RunConfig, "curriculum_samples"),
    curriculum_tasks: int = option(RunConfig, "curriculum_tasks"),
    curriculum: str = option(RunConfig, "curriculum"),
    curriculum_balance: bool = option(RunConfig, "curriculum_balance"),
    max_tokens: int = option(RunConfig, "max_tokens"),
    lora_targets: str = option(RunConfig, "lora_targets"),
    grpo_prompts: int = option(RunConfig, "grpo_prompts"),
    train_limit: int = option(RunConfig, "train_limit"),
    gpu_pool: str = option(RunConfig, "gpu_pool"),
    dask_address: str = option(RunConfig, "dask_address"),
    prefix_cache: bool = option(RunConfig, "prefix_cache"),
    eval_backend: str = option(RunConfig, "eval_backend"),
    grpo_rollout_backend: str = option(RunConfig, "grpo_rollout_backend"),
) -> None:
    """The whole loop on embedded defaults: dataset, baseline eval, SFT if needed, GRPO, eval, gate, promote."""
    values = {k: v for k, v in locals().items() if k != "ctx"}  # first: every option's value, nothing else yet
    from flywheel.flows.pipeline import check_run_claim, run_pipeline

    # only the options given: the rest come from the --profile preset, then from RunConfig's defaults (typer's
    # vendored click has its own ParameterSource enum: compare by name)
    given = {k: str(v) if isinstance(v, Path) else v for k, v in values.items()
             if getattr(ctx.get_parameter_source(k), "name", "") in ("COMMANDLINE", "ENVIRONMENT")}
    try:
        config = RunConfig(**given)
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

