"""The ``train-policy`` flow: train a LoRA adapter (SFT or GRPO), evaluate it on held-out tasks, register it.

Contract: ``train_policy(config, evaluation, registry)`` runs training as a Prefect task tagged ``gpu`` (a GPU
work pool or a ``gpu`` concurrency limit applies to it; on CPU the same code runs), writes ``OUT/adapter``,
``OUT/metrics.jsonl`` and ``OUT/train_log.json``, publishes the per-step table as an artifact, then (with
``evaluation``) runs ``baseline-eval`` on the adapter into ``OUT/eval`` and (with ``registry``) registers the
adapter as a ModelVersion whose lineage names the base model, the dataset version and its seeds, the verifier
versions, the training config and log, the parent version and the eval report. Registration moves ``candidate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.sync import concurrency

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import eval_policy
from flywheel.flows.results import TrainResult, TrainRun
from flywheel.flows.runtime import link_artifacts, progress
from flywheel.schemas import EvalReport
from flywheel.tasks.data.publish import read_manifest
from flywheel.tasks.inference.models import adapter_base, fingerprint, resolve_model
from flywheel.tasks.inference.policy import release
from flywheel.tasks.release.registry import Registry
from flywheel.tasks.training.train import TrainConfig, check_train_paths, train
from flywheel.verifiers import get_verifier

GPU_LIMIT = "gpu"
COLUMNS = ("step", "loss", "reward", "train_invalid_rate", "train_unsafe_rate", "step_time_s", "heldout_reward",
           "heldout_success", "heldout_invalid_rate", "heldout_unsafe_rate", "val_reward", "val_success", "val_margin",
           "best")


@task(name="train-adapter", tags=["gpu"], cache_policy=NO_CACHE)
def train_adapter(config: TrainConfig) -> TrainRun:
    logger = get_run_logger()

    def notify(row: dict[str, Any]) -> None:
        logger.info("step %s: %s", row["step"], {k: row[k] for k in COLUMNS[1:] if k in row})
        progress(f"train-{config.method}", row["step"], config.steps)

    # the global concurrency limit "gpu" (deploy/start.sh creates it, 1 slot per GPU) queues a second training;
    # without that limit (embedded runs) this does nothing
    with concurrency(GPU_LIMIT, occupy=1):
        return TrainRun.model_validate(train(config, notify))


def history_markdown(result: TrainRun) -> str:
    rows = result.history
    cols = [c for c in COLUMNS if any(c in r for r in rows)]
    cell = lambda v: "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = [f"# {result.method.upper()} on {result.tasks} train tasks ({result.train_s:.0f} s)", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def lineage(config: TrainConfig, result: TrainRun, parent: str | None) -> dict[str, Any]:
    """ModelVersion fields (besides files): where the adapter came from, all of it traceable."""
    manifest = read_manifest(Path(config.dataset))
    base = Path(result.base_model)
    root = adapter_base(base) if (base / "adapter_config.json").is_file() else base
    return {"name": f"{manifest.name}-{config.method}",
            "base_model": {"ref": "embedded" if config.model is None else config.model, "path": str(root),
                           "hash": fingerprint(root)},
            "dataset": {"path": str(Path(config.dataset).resolve()), "name": manifest.name,
                        "version": manifest.version, "content_hash": manifest.content_hash,
                        "seeds_hash": manifest.seeds_hash, "run_seed": manifest.run_seed},
            "verifiers": {manifest.env: get_verifier(manifest.env).VERSION},
            "training": {"config": config.model_dump(), "train_s": result.train_s, "tasks": result.tasks,
                         "resumed_from": result.resumed_from, "selected_step": result.selected_step,
                         "flags": result.flags, "last": result.history[-1] if result.history else {}},
            "parent": parent}


@flow(name="train-policy", persist_result=True)
def train_policy(config: TrainConfig, evaluation: EvalConfig | None = None, registry: str | None = None,
                 parent: str | None = None) -> TrainResult:
    check_train_paths(Path(config.out), resolve_model(config.model), Path(registry) if registry else None, parent)
    if evaluation is not None and (Path(evaluation.dataset).resolve() != Path(config.dataset).resolve()
                                   or evaluation.split != "heldout"):
        raise ValueError(f"evaluation must be of the trained dataset's held-out split ({config.dataset}), not "
                         f"{evaluation.split} of {evaluation.dataset}: the registered metrics describe that eval")
    release("vllm")  # an eval's vLLM engine would hold its KV cache's memory through training
    result = train_adapter(config)
    create_markdown_artifact(key=f"train-{config.method}", markdown=history_markdown(result),
                             description=f"{config.method} training log")
    link_artifacts(f"train-{config.method}", {"metrics": Path(config.out) / "metrics.jsonl",
                                              "adapter": result.adapter})
    folder, metrics, version = None, {}, None
    if evaluation is not None:
        done = eval_policy(evaluation.model_copy(update={"model": result.adapter,
                                                         "out": str(Path(config.out) / "eval")}))
        folder = str(Path(config.out) / "eval")
        metrics = EvalReport.model_validate_json(Path(done.report).read_text(encoding="utf-8")).metrics
    if registry is not None:
        fields = lineage(config, result, parent) | {"metrics": {k: v.model_dump() for k, v in metrics.items()}}
        report_path = Path(folder) / "report.json" if folder else None
        version = Registry(registry).register(Path(result.adapter), fields, report_path).id
    return TrainResult(adapter=result.adapter, train_s=result.train_s, history=result.history, eval=folder,
                       version=version, metrics=metrics, selected_step=result.selected_step, flags=result.flags)

