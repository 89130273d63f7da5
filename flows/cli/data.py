"""Data commands: ``generate`` (the dataset flow), ``ingest`` (production trajectories), ``dedupe`` (any JSONL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import orjson
import typer
from pydantic import ValidationError

from flywheel.flows.cli.base import (
    app,
    check_output,
    err,
    explain,
    fail,
    in_api,
    option,
    output_or_fail,
    with_progress,
)
from flywheel.flows.cli.jsonl import parse_line, read_jsonl, report_bad, write_atomic
from flywheel.flows.config import GenerateConfig  # light: pydantic only (no Prefect, no Dask)
from flywheel.flows.ingest_config import IngestConfig  # the model only: the flow imports Prefect and polars
from flywheel.tasks.data.dedupe import NearDupParams, Unit  # a dataclass: its defaults are dedupe's options'


@app.command()
def generate(
    env: str = option(GenerateConfig, "env"),
    n: int = option(GenerateConfig, "n", "--n"),
    seed: int = option(GenerateConfig, "seed"),
    out: Path = option(GenerateConfig, "out"),
    backend: str = option(GenerateConfig, "backend"),
    model: str = option(GenerateConfig, "model"),
    base_url: str = option(GenerateConfig, "base_url"),
    workers: int = option(GenerateConfig, "workers"),
    dask_address: str = option(GenerateConfig, "dask_address"),
    name: str = option(GenerateConfig, "name"),
    heldout_fraction: float = option(GenerateConfig, "heldout_fraction"),
    threshold: float = option(GenerateConfig, "threshold"),
    max_candidates: int = option(GenerateConfig, "max_candidates"),
    max_tool_share: float = option(GenerateConfig, "max_tool_share"),
    parents: list[Path] = option(GenerateConfig, "parents", "--parent"),
    cache_dir: Path = option(GenerateConfig, "cache_dir"),
    seeds_dir: Path = option(GenerateConfig, "seeds_dir", show_default=False),  # an absolute path: machine-specific
) -> None:
    """Generate, validate, deduplicate, split and publish a dataset version; prints its folder."""
    try:
        config = GenerateConfig.model_validate(dict(
            env=env, n=n, seed=seed, out=str(out), backend=backend, model=model, base_url=base_url, workers=workers,
            dask_address=dask_address, name=name, max_candidates=max_candidates, heldout_fraction=heldout_fraction,
            threshold=threshold, max_tool_share=max_tool_share, parents=tuple(str(p) for p in parents),
            cache_dir=str(cache_dir) if cache_dir else None, **({"seeds_dir": str(seeds_dir)} if seeds_dir else {})))
        # Dask, the verifiers: imported once the options passed their checks
        from flywheel.flows.stages import load_env

        load_env(config.seeds_dir, config.env)  # a bad seed line fails here, before any server starts
        check_output(Path(config.out), "--out", folder_wanted=True)
        from flywheel.tasks.data.publish import check_version_links

        check_version_links(Path(config.out) / config.dataset_name)  # no link where the version lands
        from flywheel.flows.generate import run_generate

        summary = with_progress(lambda: run_generate(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(explain(exc))
    c = summary.counts
    err.print(f"train {c.train}, held-out {c.heldout}, rejected {c.rejected} of {c.candidates} candidates; "
              f"reasons: {summary.reject_reasons}", highlight=False)
    if summary.cache_hits:
        err.print(f"from cache: {', '.join(summary.cache_hits)}", highlight=False)
    if c.train + c.heldout < config.n:
        err.print(f"[yellow]only {c.train + c.heldout} of {config.n} rows passed every stage "
                  "(candidate budget spent)[/yellow]")
    typer.echo(summary.version_dir)


@app.command()
def ingest(
    trajectories: Path = option(IngestConfig, "trajectories"),
    dataset: Path = option(IngestConfig, "dataset"),
    threshold: float = option(IngestConfig, "threshold"),
) -> None:
    """Re-score production trajectories, bucket the failures, add them as held-out regression tasks (new version)."""
    from flywheel.flows.ingest import ingest_trajectories
    from flywheel.tasks.data.ingest import read_trajectories

    try:
        config = IngestConfig(trajectories=str(trajectories), dataset=str(dataset), threshold=threshold)
        read_trajectories(trajectories)  # a bad line is one line with its number, before any flow run starts
        summary = in_api(lambda: ingest_trajectories(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(explain(exc))
    err.print(f"buckets   {json.dumps(summary.buckets, sort_keys=True)}", highlight=False)
    err.print(f"report    {summary.report}", highlight=False)
    err.print(f"added     {summary.added} held-out regression tasks", highlight=False)
    typer.echo(summary.version_dir)


@app.command()
def dedupe(
    input: Path = typer.Option(..., "--input", help="JSONL file."),
    output: Path = typer.Option(..., help="JSONL: each row plus \"cluster_id\" and \"keep\"."),
    field: str = typer.Option(..., help="The text field to compare."),
    threshold: float = typer.Option(NearDupParams.threshold, help="Jaccard threshold (0, 1]."),
    ngram: int = typer.Option(NearDupParams.ngram, help="Shingle size."),
    unit: str = typer.Option(NearDupParams.unit, help="word | char"),
) -> None:
    """Near-duplicate detection (MinHash LSH) on any JSONL file; the first row of a cluster is kept."""
    from flywheel.tasks.data.dedupe import MAX_TEXT_CHARS, near_duplicates

    try:
        params = NearDupParams(threshold=threshold, ngram=ngram, unit=cast(Unit, unit))  # checked by NearDupParams
    except ValueError as exc:
        fail(f"--{explain(exc)}")
    output_or_fail(output, "--output", inputs=(("--input", input),))
    rows = read_jsonl(input)
    records, bad = [], []
    for lineno, line in rows:
        try:
            record = parse_line(line)
            if not isinstance(record, dict) or not isinstance(record.get(field), str):
                raise ValueError(f"expected an object with a string field {field!r}")
            if len(record[field]) > MAX_TEXT_CHARS:  # bounds one row's shingles, whatever --ngram is
                raise ValueError(f"field {field!r} has {len(record[field]):,} characters; dedupe compares at most "
                                 f"{MAX_TEXT_CHARS:,}: shorten it or compare another field")
            records.append((lineno, record))
        except ValueError as exc:
            bad.append(f"{input}:{lineno}: {explain(exc)}")
    ids = [f"line-{lineno}" for lineno, _ in records]
    res = near_duplicates(ids, [r[field] for _, r in records], params)
    lines = [orjson.dumps({**r, "cluster_id": c, "keep": k}).decode() + "\n"  # strict JSON, like the input
             for (_, r), c, k in zip(records, res.cluster_id, res.keep)]
    write_atomic(output, lines)
    err.print(f"{len(records)} rows, {sum(res.keep)} kept, {len(records) - sum(res.keep)} near duplicates -> {output}",
              highlight=False, markup=False, soft_wrap=True)
    report_bad(bad, len(rows))

