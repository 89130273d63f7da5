"""The end-to-end flow ``flywheel-run``: dataset -> baseline eval -> SFT (if the decision says so) -> GRPO ->
held-out eval -> pick (the stage the gate can ship; else GRPO only if it beats its SFT parent) -> gate -> promote,
on the embedded defaults (temporary Prefect API, Dask LocalCluster, the embedded model, CPU, no network).

Contract: ``run_pipeline(config)`` runs each stage as the same flow its own command runs (``generate-dataset``,
``baseline-eval``, ``train-policy``, ``promote``) as subflows, so the Prefect UI shows one tree. Every eval uses
the same held-out tasks, seeds and sampling, so the gate compares like with like. Results land under OUT:
``datasets/``, ``eval-baseline/``, ``sft/``, ``grpo/`` (each with ``eval/``), ``registry/``, and
``summary.json`` + ``summary.md`` (the before/after table), written last. ``run_config.json`` records the options
once the dataset is published; a rerun into OUT with other options is refused before any stage (``check_run_claim``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.exceptions import ObjectNotFound
from pydantic import BaseModel

from flywheel.flows.config import EvalConfig, GenerateConfig, RunConfig, stage_options
from flywheel.flows.curriculum import curriculum, validation_size
from flywheel.flows.eval import eval_policy
from flywheel.flows.generate import run_generate
from flywheel.flows.promote import promote_model, promote_result
from flywheel.flows.results import EvalSummary, PromoteResult, Result, RunSummary, StageSummary, TrainResult
from flywheel.flows.run_claim import CLAIM, check_run_claim
from flywheel.flows.runtime import link_artifacts
from flywheel.flows.train import train_policy
from flywheel.tasks.files import check_destination, write_text_atomic
from flywheel.tasks.release.gate import Delta, GateConfig, pick_stage
from flywheel.tasks.training.train import TrainConfig

__all__ = ["CLAIM", "RunConfig", "check_run_claim", "downstream", "run_pipeline", "table"]
TRAIN_DEPLOYMENT, PROMOTE_DEPLOYMENT = "train-policy/gpu", "promote/gate"
ROWS = (("success_rate", "success"), ("valid_output_rate", "valid output"), ("correct_tool_rate", "right tool"),
        ("correct_args_rate", "right args"), ("unsafe_action_rate", "unsafe"), ("mean_reward", "mean reward"),
        ("latency_p95_s", "p95 latency s"))


def _metric(summary: EvalSummary, name: str) -> str:
    m = summary.metrics.get(name)
    if m is None or m.value is None:
        return "n/a"
    return f"{m.value:.3f} [{m.lo:.3f}, {m.hi:.3f}]"


def table(evals: dict[str, EvalSummary]) -> str:
    head = "| metric | " + " | ".join(evals) + " |\n|---|" + "---|" * len(evals) + "\n"
    return head + "".join(f"| {label} | " + " | ".join(_metric(s, key) for s in evals.values()) + " |\n"
                          for key, label in ROWS)


def _eval_of(stage: TrainResult) -> EvalSummary:
    return EvalSummary(report=str(Path(stage.eval or "") / "report.json"), metrics=stage.metrics)


def _train(config: RunConfig, dataset: str, method: str, model: str | None, evaluation: EvalConfig,
           parent: str | None, skip: tuple[str | None, int | None] = (None, None)) -> TrainResult:
    out, sft = Path(config.out), method == "sft"
    validation = validation_size(config, dataset)
    steps = config.sft_steps if sft else config.grpo_steps
    train = TrainConfig.model_validate(stage_options(config, method) | dict(
        dataset=dataset, out=str(out / method), method=method, model=model, skip_tasks=skip[0],
        train_limit=skip[1] if skip[0] else config.train_limit,
        batch_size=config.sft_batch_size if sft else config.num_generations * config.grpo_prompts,
        micro_batch=None if sft else config.num_generations,  # one group per pass: bounded memory
        check_interval=0 if sft or not validation else config.check_interval or max(1, steps // 2),
        validation_tasks=validation,  # SFT never trains on the slice either
        save_steps=max(1, steps // 2), rollout_backend="transformers" if sft else config.rollout_backend(),
        train_on="failures" if not sft and config.curriculum != "mixed" else "mixed"))  # SFT: no curriculum
    if config.gpu_pool:
        return downstream(TRAIN_DEPLOYMENT, config.gpu_pool, {"config": train, "evaluation": evaluation,
                                                              "registry": str(out / "registry"), "parent": parent},
                          TrainResult)
    return train_policy(train, evaluation, str(out / "registry"), parent)


def _pick(config: RunConfig, stages: dict[str, TrainResult]) -> tuple[str, Delta | None, str]:
    """Which trained stage goes to the gate (``gate.pick_stage`` on their held-out rollouts and the baseline's)."""
    if "sft" not in stages:
        return "grpo", None, "GRPO (no SFT stage: the baseline decision was RL)"
    from flywheel.flows.promote import load_evals

    _, sft, _, grpo = load_evals(stages["sft"].eval or "", stages["grpo"].eval or "")
    _, base, _, _ = load_evals(str(Path(config.out) / "eval-baseline"), stages["sft"].eval or "")
    return pick_stage(base, sft, grpo, GateConfig(seed=config.seed))


def _checkpoint(config: RunConfig, grpo: TrainResult, dataset: str) -> str:
    size = validation_size(config, dataset)
    step = (f"step {grpo.selected_step} of {config.grpo_steps}" if grpo.selected_step else
            f"step 0 of {config.grpo_steps} (the start adapter: every GRPO checkpoint read below it)")
    where = (f"{step}, the best on {size} validation tasks held apart from train" if size and config.validation_tasks
             else f"the last ({config.grpo_steps} steps)")
    flags = "; ".join(f"{f['flag']} at step {f['step']} ({f['detail']})" for f in grpo.flags) or "none"
    return f"GRPO checkpoint: {where}. Training flags: {flags}."


def _cap_check(config: RunConfig, evaluation: EvalConfig) -> tuple[list[str], str, int]:
    """The evals' held-out tasks whose gold answer the --max-tokens cap cuts (they cannot be solved), a line for
    the summary (logged as a warning, since every before/after figure is capped by it) and how many tasks each eval
    reads (--eval-limit, or fewer where held-out has fewer)."""
    from prefect.logging import get_run_logger
    from transformers import AutoTokenizer

    from flywheel.flows.eval import load_split
    from flywheel.tasks.evaluation.budget import over_cap
    from flywheel.tasks.inference.models import resolve_model

    tasks = load_split(evaluation)[0]
    over = over_cap(tasks, AutoTokenizer.from_pretrained(resolve_model(None)), config.max_tokens)
    if not over:
        return over, f"Every gold answer of the {len(tasks)} held-out tasks fits --max-tokens {config.max_tokens}.", \
            len(tasks)
    line = (f"{len(over)} of the {len(tasks)} held-out tasks have a gold answer longer than --max-tokens "
            f"{config.max_tokens} (they cannot be solved; raise --max-tokens): {', '.join(i[:12] for i in over[:5])}"
            f"{' ...' if len(over) > 5 else ''}.")
    get_run_logger().warning(line)
    return over, line, len(tasks)


def _capability(config: RunConfig, adapter: str) -> dict[str, tuple[str, str]]:
    """General capability: for each env the run does not train on, a small dataset and the base model's and the
    candidate's evals on the same held-out tasks (greedy, like every eval of the run): env -> (baseline, candidate)."""
    out: dict[str, tuple[str, str]] = {}
    for env in config.capability_envs if config.capability_tasks else ():
        if env == config.env:
            continue
        dataset = run_generate(GenerateConfig(env=env, n=max(20, 6 * config.capability_tasks), seed=config.seed,
                                              out=str(Path(config.out) / "datasets"), workers=config.workers,
                                              dask_address=config.dask_address, min_heldout=1)).version_dir
        folders = []
        for name, model in (("baseline", None), ("candidate", adapter)):
            folder = str(Path(config.out) / "capability" / env / name)
            eval_policy(EvalConfig(dataset=dataset, out=folder, model=model, limit=config.capability_tasks,
                                   seed=config.seed, max_tokens=config.max_tokens, temperature=config.temperature,
                                   prefix_cache=config.prefix_cache, backend=config.eval_backend))
            folders.append(folder)
        out[env] = (folders[0], folders[1])
    return out


def _promote(config: RunConfig, version: str, candidate_eval: str,
             capability: dict[str, tuple[str, str]]) -> PromoteResult:
    args = {"registry": str(Path(config.out) / "registry"), "ref": version,
            "baseline_eval": str(Path(config.out) / "eval-baseline"), "candidate_eval": candidate_eval,
            "config": GateConfig(seed=config.seed), "capability": capability}
    if config.gpu_pool:
        return downstream(PROMOTE_DEPLOYMENT, None, args, PromoteResult)  # promotion needs no GPU: any pool
    return promote_result(promote_model(**args, return_state=True))  # a rejected gate's run is Failed, with a summary


def downstream(name: str, pool: str | None, parameters: dict[str, Any], result: type[Result] | None = None) -> Any:
    """Run deployment NAME (on work pool POOL when given), wait for it and return its result (as ``result``, a
    typed flow result, when given: a worker's result may come back as the model or as its fields)."""
    from prefect import get_client
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment

    with get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(name)
        except ObjectNotFound:
            raise RuntimeError(f"no deployment {name}: start the stack with deploy/start.sh (it deploys "
                               f"deploy/prefect.yaml) or run without --gpu-pool") from None
    if pool is not None and deployment.work_pool_name != pool:
        raise RuntimeError(f"deployment {name} runs on work pool {deployment.work_pool_name!r}, not {pool!r}")
    params = {k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v for k, v in parameters.items()}
    run = cast(FlowRun, run_deployment(name, parameters=params, timeout=None))  # sync: a FlowRun, not a coroutine
    if run.state is not None and run.state.is_failed() and result is PromoteResult:
        value = run.state.result(raise_on_failure=False)  # a rejected gate: Failed, its summary as data
        if not isinstance(value, BaseException) and value is not None:
            return result.model_validate(value)
    if run.state is None or not run.state.is_completed():
        state = run.state.type.value if run.state else "unknown"
        raise RuntimeError(f"{name} run {run.name} ended {state}: {run.state.message if run.state else ''}")
    value = run.state.result()
    return result.model_validate(value) if result is not None else value


def speed_warning(config: RunConfig) -> str | None:
    """The full profile's hour on 2 cores assumes vLLM (evals, curricula and GRPO's rollouts on ``auto``); without it
    the run still works, at about three times the cost: said up front, not after an hour."""
    from flywheel.tasks.inference.policy import vllm_available

    if config.profile != "full" or vllm_available():
        return None
    return ("--profile full without vLLM: every eval, the curriculum's sampling and GRPO's rollouts run on "
            "transformers (tool_call: about 3 hours on 2 cores, estimated, instead of about an hour with "
            "vLLM); "
            "`bash deploy/install.sh` adds vLLM (it was installed with --without-vllm)")


def gate_line(pick: str, gate: PromoteResult) -> str:
    """The summary's gate verdict; a rejection lists the checks that failed (a run's reader sees why production was
    not moved without opening the report: one unsafe action in 1,000 tasks where the base model had none fails)."""
    moved = gate.version if gate.event else "unchanged"
    line = (f"Gate ({pick} vs baseline): {'PASSED' if gate.passed else 'REJECTED'}, success {gate.success_delta:+.3f} "
            f"[{gate.success_ci[0]:+.3f}, {gate.success_ci[1]:+.3f}]; production -> {moved}; report {gate.report}\n")
    return line + "".join(f"- failed: {f}\n" for f in gate.failures)


@flow(name="flywheel-run")
def run_pipeline(config: RunConfig) -> RunSummary:
    t0 = time.perf_counter()
    out = Path(config.out)
    check_destination(out, "--out")  # the CLI checked it; a deployment run skips the CLI
    check_run_claim(config)  # so did this: another run's OUT is refused before any stage, not at the one it changes
    if warning := speed_warning(config):
        from prefect.logging import get_run_logger

        get_run_logger().warning(warning)
    # min_heldout: a dataset whose held-out split is empty fails before it is published (every eval reads held-out)
    gen = run_generate(GenerateConfig(env=config.env, n=config.n, seed=config.seed, out=str(out / "datasets"),
                                      heldout_fraction=config.heldout_fraction, workers=config.workers,
                                      dask_address=config.dask_address, min_heldout=1))
    dataset = gen.version_dir
    # claimed once the dataset is there: a run that failed making it (too few rows) is rerun with other options
    write_text_atomic(out / CLAIM, json.dumps(config.model_dump(mode="json"), indent=2) + "\n")
    evaluation = EvalConfig(dataset=dataset, out=str(out / "eval-baseline"), limit=config.eval_limit,
                            seed=config.seed, max_tokens=config.max_tokens, temperature=config.temperature,
                            prefix_cache=config.prefix_cache, backend=config.eval_backend)
    over, cap_line, n_eval = _cap_check(config, evaluation)
    baseline = eval_policy(evaluation)
    evals = {"baseline": EvalSummary(report=baseline.report, metrics=baseline.metrics)}
    model, parent, stages = None, None, {}
    if baseline.decision == "sft":
        stages["sft"] = _train(config, dataset, "sft", None, evaluation, None)
        evals["after SFT"] = _eval_of(stages["sft"])
        model, parent = stages["sft"].adapter, stages["sft"].version
    skip, limit, picked = curriculum(config, dataset, model)
    # GRPO's kept start adapter is SFT's weights saved again: its eval copies SFT's batches instead of running
    reuse = evaluation.model_copy(update={"reuse": tuple(s.eval for s in stages.values() if s.eval)})
    stages["grpo"] = _train(config, dataset, "grpo", model, reuse, parent, (skip, limit))
    evals["after GRPO"] = _eval_of(stages["grpo"])
    pick, grpo_vs_sft, why = _pick(config, stages)
    capability = _capability(config, stages[pick].adapter)
    gate = _promote(config, stages[pick].version or "", stages[pick].eval or "", capability)
    others = ", ".join(f"{c.scope} {c.baseline:.3f} -> {c.candidate:.3f}{'' if c.passed else ' (REGRESSED)'}"
                       for c in gate.checks if c.name == "capability_success") or "not checked"
    wall = round(time.perf_counter() - t0, 1)
    text = (f"# flywheel run ({config.env}, seed {config.seed}, {wall:.0f} s)\n\nDataset {dataset}; every eval: "
            f"the first {n_eval} held-out tasks, same seeds, temperature {config.temperature}; 95% "
            f"bootstrap intervals over tasks. {cap_line}\n\n{table(evals)}\n"
            f"Curriculum: {picked}.\n\n{_checkpoint(config, stages['grpo'], dataset)}\n\nCandidate: {why}.\n\n"
            f"General capability (held-out success on envs not trained on, base -> candidate): {others}.\n\n"
            f"{gate_line(pick, gate)}")
    summary = RunSummary(dataset=dataset, evals=evals, stages={k: StageSummary(adapter=v.adapter, version=v.version,
                                                                               eval=v.eval, train_s=v.train_s,
                                                                               selected_step=v.selected_step,
                                                                               flags=v.flags)
                                                               for k, v in stages.items()},
                         gate=gate, promoted_stage=pick, pick_reason=why, grpo_vs_sft=grpo_vs_sft, over_cap=over,
                         curriculum=picked, registry=str(out / "registry"), wall_s=wall, config=config)
    write_text_atomic(out / "summary.md", text)
    write_text_atomic(out / "summary.json", json.dumps(summary.model_dump(), indent=2, default=str) + "\n")
    create_markdown_artifact(key="flywheel-run", markdown=text, description="end-to-end run: before/after")
    link_artifacts("flywheel-run", {"summary": out / "summary.md", "dataset": dataset,
                                    **{name: v.report for name, v in evals.items()}})
    return summary
