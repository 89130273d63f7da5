"""The dataset flow: seeds -> generate -> exact dedupe -> validate -> near dedupe ->
quality suite -> split + decontamination -> atomic publish.

Contract: ``run_generate(config)`` runs the Prefect flow (temporary local API
unless PREFECT_API_URL is set) with a Dask client for the CPU stages and
returns a summary: the published version folder, counts and timings. Rounds
generate candidates until ``n`` rows pass every stage or the candidate budget
is spent; zero accepted rows fail the run with the reason counts.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flywheel.flows.config import GenerateConfig, heldout_advice
from flywheel.flows.results import GenerateResult, QualityResult, SplitResult, StageResult
from flywheel.flows.runtime import (
    REJECT_SCHEMA,
    code_version,
    dask_client,
    dask_overhead,
    files_hash,
    link_artifacts,
    progress,
    read_rows,
    reason_counts,
    stage_path,
    write_rows,
)
from flywheel.flows.stages import (
    ACCEPTED_SCHEMA,
    CACHE,
    exact_stage,
    generate_stage,
    load_env,
    neardup_stage,
    run_stage,
    validate_stage,
)
from flywheel.tasks.data.dedupe import NearDupParams, Unit
from flywheel.tasks.data.generate import reject_row
from flywheel.tasks.data.publish import publish, read_manifest
from flywheel.tasks.data.quality import QualityParams, failed_expectations, run_suite
from flywheel.tasks.data.seeds import env_paths
from flywheel.tasks.data.split import contamination, split_table
from flywheel.tasks.files import check_destination
from flywheel.verifiers import get_verifier
from flywheel.verifiers.envs import get_env

FINAL_SCHEMA = {**ACCEPTED_SCHEMA, "group_id": pl.String, "split": pl.String}


class DatasetError(RuntimeError):
    """The run could not produce a dataset; the message says why and what to change."""


@task(name="quality-suite", cache_policy=CACHE, persist_result=True)
def quality_stage(cache: str, path: str, envs: tuple[str, ...], tools: tuple[str, ...],
                  max_tool_share: float) -> QualityResult:
    result = run_suite(pl.read_parquet(path), QualityParams(envs=envs, tools=tools, max_tool_share=max_tool_share))
    out = stage_path(Path(cache), "quality", {"path": path, "tools": tools, "share": max_tool_share}, ".json")
    out.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return QualityResult(result=str(out), passed=bool(result["success"]), failed=failed_expectations(result))


@task(name="split-decontaminate", cache_policy=CACHE, persist_result=True)
def split_stage(cache: str, path: str, heldout_fraction: float, split_seed: int, threshold: float,
                ngram: int, unit: Unit) -> SplitResult:
    t0 = time.perf_counter()
    rows = split_table(read_rows(path), heldout_fraction, split_seed)
    train = [r for r in rows if r["split"] == "train"]
    held = [r for r in rows if r["split"] == "heldout"]
    params = NearDupParams(threshold=threshold, ngram=ngram, unit=unit)
    verdicts = contamination([r["prompt"] for r in train], [r["prompt"] for r in held], params)
    clean = [r for r, v in zip(held, verdicts) if v is None]
    rejects = [reject_row(r, "decontaminate", *v) for r, v in zip(held, verdicts) if v is not None]
    key = {"path": path, "f": heldout_fraction, "s": split_seed, "t": threshold, "n": ngram, "u": unit}
    base = stage_path(Path(cache), "split", key)
    paths = {}
    for name, part, schema in (("train", train, FINAL_SCHEMA), ("heldout", clean, FINAL_SCHEMA),
                               ("rejected", rejects, {**REJECT_SCHEMA, "cluster_id": pl.String, "group_id": pl.String,
                                                      "split": pl.String})):
        paths[name] = write_rows(part, base.with_name(f"{base.stem}-{name}.parquet"), schema)
    return SplitResult(**paths, counts={"train": len(train), "heldout": len(clean), "rejected": len(rejects)},
                       seconds=time.perf_counter() - t0)


@task(name="publish", cache_policy=NO_CACHE)
def publish_stage(out: str, name: str, train: str, heldout: str, rejected: list[str], manifest: dict[str, Any],
                  quality_result: str) -> str:
    rejects = [pl.read_parquet(p).select(list(REJECT_SCHEMA)) for p in rejected]
    frames = {
        "train": pl.read_parquet(train),
        "heldout": pl.read_parquet(heldout),
        "rejected": pl.concat(rejects) if rejects else pl.DataFrame(schema=REJECT_SCHEMA),
    }
    quality = json.loads(Path(quality_result).read_text(encoding="utf-8"))
    return str(publish(Path(out), name, frames, manifest, {"quality.json": quality}))


def _round_size(missing: int, budget_left: int, acceptance: float) -> int:
    return min(budget_left, math.ceil(missing / max(acceptance, 0.05) * 1.1) + 8)


def _artifact(name: str, summary: dict[str, Any]) -> None:
    lines = ["| stage | in | kept | rejected |", "|---|---:|---:|---:|"]
    for stage, c in summary["stage_counts"].items():
        lines.append(f"| {stage} | {c.get('in', '')} | {c.get('kept', '')} | {c.get('rejected', '')} |")
    lines += ["", "| reject reason | rows |", "|---|---:|"]
    lines += [f"| {r} | {n} |" for r, n in summary["reject_reasons"].items()] or ["| (none) | 0 |"]
    head = f"# Dataset {name}\n\nVersion: `{summary.get('version_dir', '(not published)')}`\n\n"
    if summary.get("verifiers"):
        head += "Verifiers: " + ", ".join(f"{env} {v}" for env, v in summary["verifiers"].items()) + "\n\n"
    create_markdown_artifact(key=f"dataset-{name}".lower().replace("_", "-"), markdown=head + "\n".join(lines),
                             description="per-stage counts and reject reasons")


@dataclass
class RunLog:
    """What the flow accumulates across stages: counts, timings, reject files, cache hits."""

    stage_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    reject_files: list[str] = field(default_factory=list)
    hits: list[str] = field(default_factory=list)
    walls: dict[str, float] = field(default_factory=dict)

    def stage(self, task: Any, *args: Any) -> Any:
        return run_stage(task, *args, hits=self.hits, walls=self.walls)

    def add(self, stage: str, res: StageResult) -> None:
        counts = self.stage_counts.setdefault(stage, {})
        for key in ("in", "kept", "rejected"):
            counts[key] = counts.get(key, 0) + res.counts.get(key, 0)
        for key, value in ((f"{stage}_s", res.seconds), (f"{stage}_work_s", res.work_seconds)):
            self.timings[key] = self.timings.get(key, 0.0) + value
        self.reject_files.append(res.rejected)


def generate_rounds(config: GenerateConfig, seeds_hash: str, log: RunLog) -> tuple[str | None, int]:
    """Rounds of generate -> exact dedupe -> validate -> near dedupe until n rows pass or the budget is spent.
    Returns the accepted-rows file (candidate order) and the number of candidates made."""
    cache, prior = str(config.cache_path), None
    # parents by resolved folder and content hash: a link moved to another version, or a version rebuilt under the
    # same path, is another input to the cache and to the manifest's lineage, never the old one's result
    parents = tuple(str(Path(p).resolve()) for p in config.parents)
    parent_hashes = tuple(read_manifest(Path(p)).content_hash for p in parents)
    accepted, start, acceptance = 0, 0, 1.0
    while accepted < config.n and start < config.candidate_budget:
        stop = start + _round_size(config.n - accepted, config.candidate_budget - start, acceptance)
        gen = log.stage(generate_stage, cache, config.seeds_dir, config.env, seeds_hash, config.seed, start, stop,
                        config.backend, config.model, config.base_url, config.partition_size)
        exact = log.stage(exact_stage, cache, gen.kept, prior, config.seeds_dir, config.env)
        val = log.stage(validate_stage, cache, exact.kept, config.partition_size)
        near = log.stage(neardup_stage, cache, val.kept, prior, parents, parent_hashes, config.seeds_dir,
                         config.env, config.threshold, config.ngram, config.unit, config.partition_size)
        for stage, res in (("generate", gen), ("exact_dedupe", exact), ("validate", val), ("near_dedupe", near)):
            log.add(stage, res)
        prior, accepted = near.kept, near.accepted_total or 0
        acceptance = max(near.counts["kept"], 1) / (stop - start)
        progress("rounds", accepted, config.n)
        start = stop
    return prior, start


def select_rows(config: GenerateConfig, prior: str | None, candidates: int, log: RunLog) -> str:
    """The first n accepted rows; the rest are rejected as surplus. Zero rows fail the run."""
    rows = read_rows(prior)
    surplus = [reject_row(r, "select", "surplus_over_n", f"accepted beyond --n {config.n}") for r in rows[config.n:]]
    if surplus:
        log.reject_files.append(write_rows(surplus,
                                           stage_path(config.cache_path, "surplus", {"p": prior, "n": config.n}),
                                           {**REJECT_SCHEMA, "cluster_id": pl.String}))
    if not rows:
        reasons = reason_counts(log.reject_files)
        _artifact(config.dataset_name, {"stage_counts": log.stage_counts, "reject_reasons": reasons})
        raise DatasetError(f"0 rows accepted out of {candidates} candidates; reject reasons: {reasons}")
    selected = stage_path(config.cache_path, "selected", {"p": prior, "n": config.n})
    write_rows(rows[:config.n], selected, ACCEPTED_SCHEMA)
    return str(selected)


@flow(name="generate-dataset")
def generate_dataset(config: GenerateConfig) -> GenerateResult:
    t_start = time.perf_counter()
    check_destination(Path(config.out), "--out")  # the CLI checked it; a deployment run skips the CLI
    check_destination(Path(config.cache_path), "--cache-dir")
    seeds_path, tools_path = env_paths(config.env, Path(config.seeds_dir))
    tools, seeds = load_env(config.seeds_dir, config.env)  # fails fast on a bad seed line
    strata = get_env(config.env).strata(seeds, tools)
    seeds_hash = files_hash([p for p in (seeds_path, tools_path) if p.is_file()])
    log, cache = RunLog(), str(config.cache_path)
    with dask_client(config.workers, config.dask_address):
        log.timings["startup_cluster_s"] = time.perf_counter() - t_start
        prior, candidates = generate_rounds(config, seeds_hash, log)
    selected = select_rows(config, prior, candidates, log)
    quality = log.stage(quality_stage, cache, selected, (config.env,), strata, config.max_tool_share)
    if not quality.passed:
        raise DatasetError(f"data-quality suite failed: {', '.join(quality.failed)}; results in {quality.result}")
    split = log.stage(split_stage, cache, selected, config.heldout_fraction, config.seed, config.threshold,
                      config.ngram, config.unit)
    log.reject_files.append(split.rejected)
    log.stage_counts["split"] = split.counts
    if split.counts["heldout"] < config.min_heldout:  # before publishing: no version the caller cannot use
        rows, rejected = sum(split.counts.values()), split.counts["rejected"]
        raise DatasetError(f"the held-out split has {split.counts['heldout']} tasks, fewer than the "
                           f"{config.min_heldout} needed ({rejected} held-out rows rejected as near-duplicates of "
                           f"train), with {heldout_advice(rows, config.heldout_fraction)}")
    reasons = reason_counts(log.reject_files)
    counts = {"train": split.counts["train"], "heldout": split.counts["heldout"],
              "rejected": sum(reasons.values()), "candidates": candidates, "requested": config.n}
    manifest = {
        "env": config.env, "counts": counts, "stage_counts": log.stage_counts, "reject_reasons": reasons,
        "params": config.model_dump(mode="json", exclude={"out", "cache_dir", "workers", "dask_address", "seeds_dir",
                                                          "min_heldout"}),
        "run_seed": config.seed, "code_version": code_version(), "seeds_hash": seeds_hash,
        "verifiers": {config.env: get_verifier(config.env).VERSION},
        "parents": tuple(str(Path(p).resolve()) for p in config.parents),  # the folders, links resolved
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    version_dir = publish_stage(config.out, config.dataset_name, split.train, split.heldout,
                                log.reject_files, manifest, quality.result)
    summary = {"version_dir": version_dir, "counts": counts, "stage_counts": log.stage_counts,
               "reject_reasons": reasons, "candidates": candidates, "cache_hits": log.hits,
               "timings": {**log.timings, "task_wall_s": log.walls, "dask_overhead_s": dask_overhead(),
                           "flow_s": time.perf_counter() - t_start}}
    _artifact(config.dataset_name, summary | {"verifiers": manifest["verifiers"]})
    link_artifacts(f"dataset-{config.dataset_name}", {"manifest": Path(version_dir) / "manifest.json",
                                                       "quality": Path(version_dir) / "quality.json"})
    return GenerateResult.model_validate(summary)


def run_generate(config: GenerateConfig) -> GenerateResult:
    """Run the flow with results persisted in the cache folder (so reruns hit the cache)."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

    config.cache_path.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: str(config.cache_path / "prefect-results")}):
        return generate_dataset(config)
