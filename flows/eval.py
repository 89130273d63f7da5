"""The baseline evaluation flow: a policy on a published split, k samples per task, scored by the task's
verifier, in batches, into per-rollout parquet and an EvalReport (JSON + markdown with plots + Prefect artifact).

Contract: ``run_eval(config)`` runs the Prefect flow ``baseline-eval`` and returns a summary (report path,
decision, metrics). Each batch lands in OUT/batches/ as its own parquet file, named by a hash of everything its
rows depend on (dataset content, split, model files, backend, sampling, seeds, verifier and code versions), and
written atomically: a crashed run leaves finished batches usable, and the rerun computes only missing batches.
Same config, model and machine -> same rollouts and the same numbers (latency aside).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flywheel.flows.config import EvalConfig
from flywheel.flows.results import BatchCounts, EvalResult
from flywheel.flows.runtime import chunks, code_version, link_artifacts, progress, write_rows
from flywheel.schemas import DatasetManifest, EvalReport, Task
from flywheel.schemas.evaluation import MAX_REPORT_BYTES
from flywheel.tasks.data.publish import check_version, file_sha256, read_split
from flywheel.tasks.evaluation.metrics import buckets, decide, per_task, summarize, task_pass
from flywheel.tasks.evaluation.report import markdown, plots
from flywheel.tasks.evaluation.rollouts import ROLLOUT_SCHEMA, plan, run_batch
from flywheel.tasks.files import check_destination, read_regular, write_text_atomic
from flywheel.tasks.inference.backends import check_key_destination
from flywheel.tasks.inference.models import adapter_base, check_model, fingerprints, is_adapter, resolve_model
from flywheel.tasks.inference.policy import Backend, Sampling, make_backend, pick_backend
from flywheel.verifiers import get_verifier
from flywheel.verifiers.envs import get_env


def split_file(config: EvalConfig) -> tuple[Path, DatasetManifest]:
    """The split's parquet file and the version's manifest, checked by ``check_version`` (the file against the
    manifest, the manifest against its folder, the rows --limit reads): a bad folder or row is one line naming the
    file and row, before any flow run starts."""
    version = Path(config.dataset)
    manifest = check_version(version, (config.split,), config.limit)
    return version / f"{config.split}.parquet", manifest


def load_split(config: EvalConfig) -> tuple[list[Task], list[str], dict[str, Any]]:
    """The split's tasks ordered by id (stable, spread over tools), cut to --limit; their tool labels."""
    version = Path(config.dataset)
    manifest = check_version(version, (config.split,), config.limit)  # run_eval checked it; a deployment did not
    frame = read_split(version, config.split, ["id", "tool", "task"], manifest).sort("id")
    if config.limit:
        frame = frame.head(config.limit)
    if frame.height == 0:
        raise ValueError(f"split {config.split!r} of {version} has no tasks")
    tasks = [Task.model_validate_json(t) for t in frame["task"]]
    info = {"name": manifest.name, "version": manifest.version, "content_hash": manifest.content_hash,
            "env": manifest.env, "path": str(version.resolve())}
    return tasks, frame["tool"].to_list(), info


def base_identity(model: Path) -> dict[str, str] | None:
    """An adapter's base checkpoint as the report names it (``model.base``): the folder its
    ``base_model_name_or_path`` resolves to (absolute, relative to the adapter folder, or null: the embedded model)
    and its fingerprints (``hash``: every file, ``weights``: the files that decide what it writes); None for a full
    checkpoint. The adapter's own files do not name their base's weights: the same adapter on another base writes
    other texts, so `flywheel promote` checks this against the base the registered version resolves to.
    ValueError when the base is not a local model folder."""
    if not is_adapter(model):
        return None
    base = adapter_base(model)
    if not (base / "config.json").is_file():
        raise ValueError(f"{model}'s base {base} is not a local model folder (no config.json)")
    every, weights = fingerprints(base)
    return {"model_id": str(base.resolve()), "hash": every, "weights": weights}


def model_info(config: EvalConfig, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report's model (ref, backend, model_id, the hash of all its files and, ``weights``, of those that decide
    what it writes; ``base``: an adapter's base, ``base_identity``) and its identity in batch keys: a local model by
    the files that decide what it writes (and an adapter by its base's too), not by its folder (GRPO's kept start
    adapter is SFT's weights, saved again), so a batch of the same weights elsewhere is the same batch, and a base
    replaced in place is another batch; a served model by its URL and name."""
    if kind == "openai":
        model_id = f"{(config.base_url or '').rstrip('/')}#{config.model}"
        return ({"ref": config.model, "backend": kind, "model_id": model_id, "hash": None, "weights": None,
                 "base": None},
                {"backend": kind, "model_id": model_id})
    path = resolve_model(config.model)
    every, output = fingerprints(path)
    base = base_identity(path)
    return ({"ref": config.model or "embedded", "backend": kind, "model_id": str(path), "hash": every,
             "weights": output, "base": base},
            {"backend": kind, "weights": output, "base": base and base["weights"]})


def _key(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


Item = tuple[Task, str, int, int]  # task, tool label, sample, rollout seed
# vLLM schedules the requests of one call itself: large calls run more rollouts/s than calls of one batch
# (bench/results/throughput.md); transformers batches inside its backend
VLLM_CALL_ROWS = 256


def group_calls(pending: list[tuple[str, list[Item]]], rows: int) -> list[list[tuple[str, list[Item]]]]:
    """Consecutive pending batches grouped into backend calls of at most ``rows`` rollouts (one batch at least)."""
    calls: list[list[tuple[str, list[Item]]]] = []
    for batch in pending:
        if calls and sum(len(items) for _, items in calls[-1]) + len(batch[1]) <= rows:
            calls[-1].append(batch)
        else:
            calls.append([batch])
    return calls


def verified_rollouts(folder: Path) -> pl.DataFrame | None:
    """An earlier eval's rollouts (``EvalConfig.reuse``) when its report.json vouches for them (the sha256 it
    records, the rollout columns and types), else None: a reused folder's rows are never taken on trust, and a
    folder that cannot vouch for them is simply not reused (its batches run)."""
    try:
        report = EvalReport.model_validate_json(read_regular(folder / "report.json", MAX_REPORT_BYTES))
        if not report.rollouts_sha256 or file_sha256(folder / "rollouts.parquet") != report.rollouts_sha256:
            return None
        rows = pl.read_parquet(folder / "rollouts.parquet")
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    return rows if dict(rows.schema) == ROLLOUT_SCHEMA else None


def batch_rows(rows: pl.DataFrame, items: list[Item]) -> pl.DataFrame | None:
    """``rows`` holding exactly ``items``' tasks, samples and seeds, in their order, or None."""
    want = [(task.id, sample, seed) for task, _, sample, seed in items]
    keys = pl.DataFrame(want, schema={k: ROLLOUT_SCHEMA[k] for k in ("task_id", "sample", "seed")}, orient="row")
    picked = keys.with_row_index("_at").join(rows, on=["task_id", "sample", "seed"], how="inner").sort("_at")
    return picked.select(list(ROLLOUT_SCHEMA)) if picked.height == len(want) == picked["_at"].n_unique() else None


def _own_batch(path: Path, items: list[Item]) -> bool:
    """A finished batch file in OUT/batches (a resumed run): exactly the rollout columns and rows; a damaged one
    runs again."""
    try:
        rows = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError):
        return False
    return dict(rows.schema) == ROLLOUT_SCHEMA and rows.select("task_id", "sample", "seed").rows() == \
        [(task.id, sample, seed) for task, _, sample, seed in items]


def pending_batches(paths: list[Path], batches: Sequence[Sequence[tuple[int, int, int]]], tasks: list[Task],
                    tools: list[str], reuse: tuple[str, ...]) -> tuple[list[tuple[str, list[Item]]], dict[str, int]]:
    """The batches left to run: not finished in OUT/batches, nor found among the vouched-for rollouts of a
    ``reuse`` folder (the same batch key: the same rows); and how many were copied from each folder."""
    pending, copied = [], {}
    sources = [(folder, rows) for folder in reuse if (rows := verified_rollouts(Path(folder))) is not None]
    for path, batch in zip(paths, batches):
        items = [(tasks[t], tools[t], s, seed) for t, s, seed in batch]
        if path.is_file() and not path.is_symlink() and _own_batch(path, items):
            continue
        for folder, rows in sources:
            found = batch_rows(rows, items)
            if found is not None and (Path(folder) / "batches" / path.name).is_file():  # same key: same weights
                write_rows(found, path, ROLLOUT_SCHEMA)
                copied[folder] = copied.get(folder, 0) + 1
                break
        else:
            pending.append((str(path), items))
    return pending, copied


@task(name="eval-batch", cache_policy=NO_CACHE)
def eval_batch(backend: Backend, call: list[tuple[str, list[Item]]], sampling: Sampling, config: EvalConfig) -> int:
    """The rollouts of one backend call; each batch of it lands in its own file (the unit of resumption)."""
    rows = run_batch(backend, [it for _, items in call for it in items], sampling, config.success_threshold,
                     config.max_steps)
    start = 0
    for path, items in call:
        write_rows(rows[start:start + len(items)], Path(path), ROLLOUT_SCHEMA)
        start += len(items)
    return len(rows)


def make_report(config: EvalConfig, frame: pl.DataFrame, dataset: dict[str, Any], model: dict[str, Any],
                verifiers: dict[str, str], batch_counts: dict[str, int], timings: dict[str, float],
                copied_from: dict[str, int] | None = None) -> EvalReport:
    k, prices = config.samples, (config.price_in, config.price_out)
    if "base" not in model and model.get("hash") is not None:  # a caller that names the model itself (tests)
        model = {**model, "base": base_identity(Path(model["model_id"]))}
    metrics = summarize(frame, k, config.bootstrap, config.seed, prices)
    groups = {col: {v: summarize(frame.filter(pl.col(col) == v), k, config.bootstrap, config.seed, prices)
                    for v in sorted(frame[col].unique().to_list())} for col in ("env", "tool")}
    table = per_task(frame)
    return EvalReport(
        dataset=dataset, split=config.split, model=model, seed=config.seed, samples=k,
        # everything that decides what a rollout is, for `flywheel promote`'s like-for-like check (flows/promote.py:
        # _same_run says which of them it compares, and when)
        sampling={"temperature": config.temperature, "top_p": config.top_p, "max_tokens": config.max_tokens,
                  "max_steps": config.max_steps, "batch_size": config.batch_size,
                  "native_tools": config.native_tools, "prefix_cache": config.prefix_cache},
        success_threshold=config.success_threshold, verifiers=verifiers, n_tasks=table.height,
        n_rollouts=frame.height, metrics=metrics, per_env=groups["env"], per_tool=groups["tool"],
        failure_buckets=buckets(frame), decision=decide(metrics, k, config.thresholds), task_pass=task_pass(table),
        files={"rollouts": "rollouts.parquet", "per_task": "per_task.parquet", "report_md": "report.md"},
        batches=batch_counts, copied_from=copied_from or {}, timings=timings, code_version=code_version(),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def write_outputs(out: Path, report: EvalReport, frame: pl.DataFrame) -> EvalReport:
    write_rows(frame, out / "rollouts.parquet", ROLLOUT_SCHEMA)
    table = per_task(frame)
    write_rows(table, out / "per_task.parquet", dict(table.schema))
    # the report vouches for these exact rollouts: `flywheel promote` refuses a rollouts.parquet it does not name
    report = report.model_copy(update={"files": {**report.files, **plots(report, frame, out)},
                                       "rollouts_sha256": file_sha256(out / "rollouts.parquet")})
    write_text_atomic(out / "report.md", markdown(report))
    # last: its presence means complete
    write_text_atomic(out / "report.json", report.model_dump_json(indent=2) + "\n")
    return report


@flow(name="baseline-eval")
def eval_policy(config: EvalConfig) -> EvalResult:
    t0 = time.perf_counter()
    out = Path(config.out)
    check_destination(out, "--out")  # the CLI checked it; a deployment run skips the CLI
    tasks, tools, dataset = load_split(config)
    if config.backend != "openai":  # a bad model fails before anything in OUT is touched
        resolve_model(config.model)
        check_model(config.model)
    else:  # so does a base URL the key may not go to
        check_key_destination(config.base_url or "", os.environ.get("OPENAI_API_KEY"))
    # an earlier run's report must not stand beside this run's rollouts if this one is killed before its own
    (out / "report.json").unlink(missing_ok=True)
    (out / "batches").mkdir(parents=True, exist_ok=True)
    import torch

    # CPU: 16 rows per generate call (decode cost grows with rows); a GPU takes the whole eval batch at once
    per_call = config.batch_size if torch.cuda.is_available() else min(config.batch_size, 16)
    kind = pick_backend(config.backend, len(tasks) * config.samples,
                        episodes=any(get_env(t.env).multi_turn for t in tasks))
    model, weights = model_info(config, kind)
    sampling = Sampling(config.temperature, config.top_p, config.max_tokens)
    verifiers = {env: get_verifier(env).VERSION for env in sorted({t.env for t in tasks})}
    identity = {"dataset": dataset["content_hash"], "split": config.split, "model": weights,
                "sampling": asdict(sampling), "max_steps": config.max_steps, "threshold": config.success_threshold,
                "native": config.native_tools, "batch": config.batch_size,
                "prefix_cache": config.prefix_cache, "verifiers": verifiers,
                "code": code_version()}
    batches = chunks(plan([t.id for t in tasks], config.samples, config.seed), config.batch_size)
    paths = [out / "batches" / f"{i:05d}-{_key([identity, batch])[:16]}.parquet" for i, batch in enumerate(batches)]
    pending, copied = pending_batches(paths, batches, tasks, tools, config.reuse)
    counts = {"total": len(batches), "reused": len(batches) - len(pending), "copied": sum(copied.values()), "run": 0}
    progress("eval", counts["reused"], len(batches))
    t_load, t_gen = 0.0, 0.0  # the model's load and the rollouts: none when every batch is done or copied
    if pending:
        t1 = time.perf_counter()
        backend = make_backend(kind, config.model, config.base_url, batch_size=per_call,
                               concurrency=config.concurrency, native_tools=config.native_tools,
                               api_key=os.environ.get("OPENAI_API_KEY"), prefix_cache=config.prefix_cache)
        t2 = time.perf_counter()
        for call in group_calls(pending, VLLM_CALL_ROWS if kind == "vllm" else config.batch_size):
            eval_batch(backend, call, sampling, config)
            counts["run"] += len(call)
            progress("eval", counts["reused"] + counts["run"], len(batches))
        t_load, t_gen = t2 - t1, time.perf_counter() - t2
    mine = {p.name for p in paths}
    for stale in (out / "batches").glob("*.parquet"):  # another run's batches (other weights or settings) in this
        if stale.name not in mine:  # OUT: gone, so a batch file here is always of the rollouts report.json names
            stale.unlink()
    frame = pl.concat([pl.read_parquet(p) for p in paths])
    report = make_report(config, frame, dataset, model, verifiers, counts,
                         {"load_s": round(t_load, 3), "rollouts_s": round(t_gen, 3)}, copied)
    report = write_outputs(out, report, frame)
    key = "".join(c if c.isalnum() else "-" for c in f"eval-{dataset['name']}-{config.split}".lower())
    create_markdown_artifact(key=key, markdown=markdown(report), description="baseline evaluation report")
    link_artifacts(key, {name: out / file for name, file in report.files.items()
                         if file.endswith((".md", ".png", ".svg"))})
    return EvalResult(report=str(out / "report.json"), decision=report.decision.action, reason=report.decision.reason,
                      metrics=report.metrics, batches=BatchCounts(**counts), wall_s=round(time.perf_counter() - t0, 3))


def run_eval(config: EvalConfig) -> EvalResult:
    """Check the dataset before any flow run starts (a bad folder is one clear error), then run the flow."""
    split_file(config)
    return eval_policy(config)
