"""The ``ingest-trajectories`` flow (``flywheel ingest``): production trajectories -> re-scored with the current
verifiers -> failure buckets -> new held-out regression tasks -> a new dataset version.

Contract: reads the trajectories (a bad line fails the run before anything is written; ``flywheel ingest`` parses
them and ``IngestConfig`` checks the dataset before the flow starts, with ``check_version`` as eval and train do: its
files against its manifest, the manifest's ``name`` against the folder the version lies in and its ``env`` against
its rows' (a manifest is not hashed: an edited one could otherwise publish anywhere, or mix envs); and that the record
folder can be written), re-scores
each one (tasks/ingest.py), turns failures into held-out tasks, drops those already in the dataset (same task id),
near duplicates of each other or of existing held-out tasks, and those contaminated by train (n-gram overlap or
MinHash near-duplicate, as the split stage checks), then publishes train unchanged and held-out = old + new as a new
version of the same dataset, beside the input (atomic; parent = the input version), so the next gate includes them.
Every trajectory lands in ``record_dir(config)``/trajectories.parquet with its bucket, beside the versions:
``ingest-<input version>-<hash of the trajectories file and threshold>``, so no ingest overwrites another's record
(a rerun of the same ingest rewrites its own); nothing is dropped silently.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import polars as pl
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flywheel.flows.ingest_config import IngestConfig, record_dir
from flywheel.flows.results import IngestResult
from flywheel.flows.runtime import REJECT_SCHEMA, code_version, link_artifacts, write_rows
from flywheel.schemas import Task
from flywheel.tasks.data.dedupe import NearDupParams, near_duplicates
from flywheel.tasks.data.generate import task_row
from flywheel.tasks.data.ingest import read_trajectories, rescore
from flywheel.tasks.data.publish import publish, read_manifest, read_split
from flywheel.tasks.data.seeds import env_paths, load_tools
from flywheel.tasks.data.split import contamination
from flywheel.tasks.files import write_text_atomic
from flywheel.verifiers import get_verifier

SCORED_SCHEMA = {"trajectory": pl.String, "env": pl.String, "bucket": pl.String, "reward": pl.Float64,
                 "detail": pl.String, "disagrees": pl.Boolean, "task": pl.String, "prompt": pl.String,
                 "kept": pl.String}


def _new_rows(scored: list[dict[str, Any]], heldout: pl.DataFrame, train: pl.DataFrame,
              threshold: float) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Held-out rows for the failures that survive dedupe and decontamination; the verdict per trajectory."""
    fails = [r for r in scored if r["task"]]
    tasks = [Task.model_validate_json(r["task"]) for r in fails]
    known = set(heldout["id"]) | set(train["id"])
    verdict, rows = {}, []
    params = NearDupParams(threshold=threshold)
    near = near_duplicates([t.id for t in tasks], [t.prompt for t in tasks], params, list(heldout["id"]),
                           list(heldout["prompt"]))
    leak = contamination(list(train["prompt"]), [t.prompt for t in tasks], params)
    start = max(cast(int, heldout["k"].max() or 0), cast(int, train["k"].max() or 0)) + 1
    for r, t, keep, dup, bad in zip(fails, tasks, near.keep, near.duplicate_of, leak):
        if t.id in known:
            verdict[r["trajectory"]] = "duplicate: already in the dataset"
        elif not keep:
            verdict[r["trajectory"]] = f"near duplicate of {dup}"
        elif bad is not None:
            verdict[r["trajectory"]] = f"{bad[0]}: {bad[1]}"
        else:
            known.add(t.id)
            verdict[r["trajectory"]] = "added"
            rows.append(task_row(t, start + len(rows)) | {"cluster_id": t.id, "group_id": t.id, "split": "heldout"})
    return rows, verdict


@task(name="rescore-trajectories", cache_policy=NO_CACHE)
def rescore_all(config: IngestConfig, env: str) -> list[dict[str, Any]]:
    trajectories = read_trajectories(Path(config.trajectories))
    catalog = load_tools(env_paths(env)[1])
    return [rescore(t, catalog, env) for t in trajectories]


def _markdown(source: str, version: str, scored: pl.DataFrame, added: int) -> str:
    counts = Counter(scored["bucket"])
    lines = [f"# Ingest {source} -> {version}", "", f"{scored.height} trajectories re-scored; {added} new held-out "
             "regression tasks.", "", "| bucket | trajectories |", "|---|---:|"]
    lines += [f"| {b} | {n} |" for b, n in sorted(counts.items())]
    lines += ["", "| what became of a failure | trajectories |", "|---|---:|"]
    kept = Counter(k.split(":")[0] for k in scored["kept"] if k)
    lines += [f"| {k} | {n} |" for k, n in sorted(kept.items())] or ["| (no failures) | 0 |"]
    gaps = int(scored["disagrees"].sum())
    return "\n".join(lines) + f"\n\nVerifier passes on failed production outcomes (look at these): {gaps}\n"


@flow(name="ingest-trajectories")
def ingest_trajectories(config: IngestConfig) -> IngestResult:
    src = Path(config.dataset).resolve()  # IngestConfig checked that the manifest's name is this folder's parent's
    out = record_dir(config)
    manifest = read_manifest(src)
    train, heldout = read_split(src, "train", manifest=manifest), read_split(src, "heldout", manifest=manifest)
    scored = rescore_all(config, manifest.env)
    rows, verdict = _new_rows(scored, heldout, train, config.threshold)
    frame = pl.DataFrame([r | {"kept": verdict.get(r["trajectory"], "")} for r in scored], schema=SCORED_SCHEMA)
    frames = {"train": train, "heldout": pl.concat([heldout, pl.DataFrame(rows, schema=heldout.schema)]),
              "rejected": read_split(src, "rejected", manifest=manifest).select(list(REJECT_SCHEMA))}
    counts = {**manifest.counts, "heldout": frames["heldout"].height, "regression_added": len(rows)}
    fields = {"env": manifest.env, "counts": counts, "stage_counts": manifest.stage_counts,
              "reject_reasons": manifest.reject_reasons, "run_seed": manifest.run_seed, "code_version": code_version(),
              "seeds_hash": manifest.seeds_hash, "parents": (str(src.resolve()),),
              "verifiers": {manifest.env: get_verifier(manifest.env).VERSION},  # what scored the rows added here
              "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "params": {**manifest.params, "ingest": {"trajectories": str(Path(config.trajectories).resolve()),
                                                       "threshold": config.threshold, "added": len(rows)}}}
    version = publish(src.parent.parent, src.parent.name, frames, fields) if rows else src
    write_rows(frame, out / "trajectories.parquet", SCORED_SCHEMA)
    text = _markdown(src.name, version.name, frame, len(rows))
    write_text_atomic(out / "report.md", text)
    create_markdown_artifact(key="ingest", markdown=text, description="production trajectories re-scored")
    link_artifacts("ingest", {"report": out / "report.md", "version": version / "manifest.json"})
    return IngestResult(version_dir=str(version), added=len(rows), buckets=dict(Counter(frame["bucket"])),
                        report=str(out / "report.md"), trajectories=str(out / "trajectories.parquet"))
