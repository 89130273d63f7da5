"""Prefect tasks for the dataset flow: each wraps one pure stage and works on a whole batch.

Contract: a stage reads and writes parquet files under the cache folder and
returns a small dict (file paths, counts, seconds). Results are cached on
inputs and task source (``TASK_SOURCE + INPUTS``), so a rerun with the same
parameters recomputes nothing and a changed parameter recomputes only the
stages that depend on it.
"""

from __future__ import annotations

import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE, CacheKeyFnPolicy

from flywheel.flows.results import StageResult
from flywheel.flows.runtime import (
    REJECT_SCHEMA,
    ROW_SCHEMA,
    chunks,
    code_version,
    fan_out,
    progress,
    read_rows,
    stage_path,
    write_rows,
)
from flywheel.tasks.data.dedupe import NearDupParams, Unit, exact_dedupe, near_duplicates, sketch
from flywheel.tasks.data.generate import generate_candidates, reject_row
from flywheel.tasks.data.paraphrase import make_paraphraser
from flywheel.tasks.data.publish import read_split
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task
from flywheel.tasks.data.validate import validate_rows
from flywheel.verifiers.envs import env_names, get_env

CODE_VERSION = code_version()
# TASK_SOURCE covers only the task's own body; the code version covers the pure functions it calls.
CACHE = TASK_SOURCE + INPUTS + CacheKeyFnPolicy(cache_key_fn=lambda context, parameters: CODE_VERSION)
ACCEPTED_SCHEMA = {**ROW_SCHEMA, "cluster_id": pl.String}


def run_stage(stage: Any, *args: Any, hits: list[str], walls: dict[str, float] | None = None) -> Any:
    """Run a stage task; note cache hits and the task's wall time as the flow sees it (Prefect
    overhead included); recompute if a cached result's files are gone."""
    start = time.perf_counter()
    state = stage(*args, return_state=True)
    result = state.result()
    if state.name == "Cached" and all(Path(f).exists() for f in result.files()):
        hits.append(stage.name)
    elif state.name == "Cached":
        result = stage.with_options(refresh_cache=True)(*args)
    if walls is not None:
        walls[stage.name] = walls.get(stage.name, 0.0) + time.perf_counter() - start
    return result


def load_env(seeds_dir: str, env: str) -> tuple[dict[str, Any], list[Any]]:
    """The env's tool catalog (required where its spec has one) and seeds; errors name the file and what to fix."""
    seeds_path, tools_path = env_paths(env, Path(seeds_dir))
    if env in env_names() and get_env(env).tools_path is not None and not tools_path.is_file():
        raise ValueError(f"no tool catalog for env {env!r} at {tools_path}")
    tools = load_tools(tools_path) if tools_path.is_file() else {}
    return tools, load_seeds(seeds_path, tools)


def _result(kept: list[dict] | pl.DataFrame, rejected: list[dict], path: Path, start: float, work: float,
            schema: dict, accepted_total: int | None = None) -> StageResult:
    return StageResult(kept=write_rows(kept, path, schema),
                       rejected=write_rows(rejected, path.with_name(path.stem + "-rejected.parquet"), REJECT_SCHEMA),
                       counts={"in": len(kept) + len(rejected), "kept": len(kept), "rejected": len(rejected)},
                       seconds=time.perf_counter() - start, work_seconds=work, accepted_total=accepted_total)


def _generate_part(ks: range, seeds: list, tools: dict, run_seed: int, part_dir: str) -> tuple[str, list]:
    """Write the partition's rows next to the stage file (shared storage) and return only the path:
    shipping rows back through Dask cost more than making them."""
    rows, rejects = generate_candidates(ks, seeds, tools, run_seed)
    return write_rows(rows, Path(part_dir) / f"part-{ks.start}-{ks.stop}.parquet", ROW_SCHEMA), rejects


@task(name="generate-variants", cache_policy=CACHE, persist_result=True)
def generate_stage(cache: str, seeds_dir: str, env: str, seeds_hash: str, run_seed: int, start: int, stop: int,
                   backend: str, model: str | None, base_url: str | None, partition_size: int) -> StageResult:
    t0 = time.perf_counter()
    tools, seeds = load_env(seeds_dir, env)
    parts = chunks(range(start, stop), partition_size)
    path = stage_path(Path(cache), "generate", {"seeds": seeds_hash, "seed": run_seed, "start": start, "stop": stop,
                                                "backend": backend, "model": model, "base_url": base_url})
    if backend == "sampler":
        part_dir = path.with_suffix(".parts")
        part_dir.mkdir(parents=True, exist_ok=True)
        results, work = fan_out(partial(_generate_part, seeds=seeds, tools=tools, run_seed=run_seed,
                                        part_dir=str(part_dir)), parts, "generate")
        s = time.perf_counter()
        frame = pl.concat([pl.read_parquet(p) for p, _ in results]) if results else pl.DataFrame(schema=ROW_SCHEMA)
        shutil.rmtree(part_dir, ignore_errors=True)
        rejects = [r for _, rej in results for r in rej]
        return _result(frame, rejects, path, t0, work + time.perf_counter() - s, ROW_SCHEMA)
    else:  # one model load in this process; batches stay a function of the input alone
        paraphraser = make_paraphraser(backend, model, base_url)
        results, work = [], 0.0
        for i, ks in enumerate(parts):
            s = time.perf_counter()
            results.append(generate_candidates(ks, seeds, tools, run_seed, paraphraser))
            work += time.perf_counter() - s
            progress("generate", i + 1, len(parts))
    rows = [r for kept, _ in results for r in kept]
    rejects = [r for _, rej in results for r in rej]
    return _result(rows, rejects, path, t0, work, ROW_SCHEMA)


@task(name="exact-dedupe", cache_policy=CACHE, persist_result=True)
def exact_stage(cache: str, path: str, prior: str | None, seeds_dir: str, env: str) -> StageResult:
    t0 = time.perf_counter()
    tools, seeds = load_env(seeds_dir, env)
    seen = {seed_task(s, tools).id for s in seeds} | {r["id"] for r in read_rows(prior)}
    kept, dups = exact_dedupe(read_rows(path), seen)
    rejects = [reject_row(r, "exact_dedupe", "exact_duplicate", "same Task.id as a seed or an earlier row")
               for r in dups]
    return _result(kept, rejects, stage_path(Path(cache), "exact", {"path": path, "prior": prior}), t0,
                   time.perf_counter() - t0, ROW_SCHEMA)


def _validate_part(bounds: tuple[int, int], path: str) -> list[tuple[int, str, str]]:
    rows = pl.scan_parquet(path).slice(bounds[0], bounds[1]).collect().to_dicts()
    _, rejects = validate_rows(rows)
    return [(r["k"], r["reason"], r["detail"]) for r in rejects]


@task(name="validate", cache_policy=CACHE, persist_result=True)
def validate_stage(cache: str, path: str, partition_size: int) -> StageResult:
    t0 = time.perf_counter()
    rows = read_rows(path)
    bounds = [(i, partition_size) for i in range(0, len(rows), partition_size)]
    results, work = fan_out(partial(_validate_part, path=path), bounds, "validate")
    bad = {k: (reason, detail) for part in results for k, reason, detail in part}
    kept = [r for r in rows if r["k"] not in bad]
    rejects = [reject_row(r, "validate", *bad[r["k"]]) for r in rows if r["k"] in bad]
    return _result(kept, rejects, stage_path(Path(cache), "validate", {"path": path}), t0, work, ROW_SCHEMA)




def reference_texts(seeds_dir: str, env: str, prior: str | None,
                    parents: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Seeds, rows accepted in earlier rounds and rows of parent versions: what new rows must not repeat."""
    tools, seeds = load_env(seeds_dir, env)
    refs = [(t.id, t.prompt) for t in (seed_task(s, tools) for s in seeds)]
    refs += [(r["id"], r["prompt"]) for r in read_rows(prior)]
    for parent in parents:
        for split in ("train", "heldout"):
            df = read_split(Path(parent), split, ["id", "prompt"])  # checked against the parent's manifest
            refs += list(zip(df["id"], df["prompt"]))
    return [i for i, _ in refs], [t for _, t in refs]


@task(name="near-dedupe", cache_policy=CACHE, persist_result=True)
def neardup_stage(cache: str, path: str, prior: str | None, parents: tuple[str, ...], parent_hashes: tuple[str, ...],
                  seeds_dir: str, env: str, threshold: float, ngram: int, unit: Unit,
                  partition_size: int) -> StageResult:
    """``parent_hashes``: the parents' content hashes, so the cached result is keyed by what they hold."""
    t0 = time.perf_counter()
    params = NearDupParams(threshold=threshold, ngram=ngram, unit=unit)
    rows = read_rows(path)
    ref_ids, ref_texts = reference_texts(seeds_dir, env, prior, parents)
    texts = [r["prompt"] for r in rows] + ref_texts
    parts, work = fan_out(partial(sketch, params=params), chunks(texts, partition_size), "near-dedupe")
    s = time.perf_counter()
    sketches = ([h for hashed, _ in parts for h in hashed], np.vstack([sig for _, sig in parts])) if parts else None
    res = near_duplicates([r["id"] for r in rows], texts[:len(rows)], params, ref_ids, ref_texts, sketches)
    work += time.perf_counter() - s
    kept, rejects = [], []
    for row, keep, cluster, dup, sim in zip(rows, res.keep, res.cluster_id, res.duplicate_of, res.similarity):
        if keep:
            kept.append({**row, "cluster_id": cluster})
        else:
            reason = "near_duplicate_of_reference" if dup and dup.startswith("ref:") else "near_duplicate"
            rejects.append(reject_row(row, "near_dedupe", reason, f"Jaccard {sim:.3f} with {dup} (cluster {cluster})"))
    accepted = read_rows(prior) + kept  # rows accepted in earlier rounds come first: candidate order
    key = {"path": path, "prior": prior, "parents": parents, "hashes": parent_hashes, "t": threshold, "n": ngram,
           "u": unit}
    out = _result(accepted, rejects, stage_path(Path(cache), "neardup", key), t0, work, ACCEPTED_SCHEMA, len(accepted))
    return out.model_copy(update={"counts": {"in": len(rows), "kept": len(kept), "rejected": len(rejects)}})
