"""Data commands: ``generate`` (the dataset flow), ``ingest`` (production trajectories), ``dedupe`` (any JSONL)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import typer
from pydantic import ValidationError

from flywheel.flows.cli.base import app, check_output, err, explain, fail, in_api, output_or_fail, with_progress
from flywheel.flows.cli.jsonl import parse_line, read_jsonl, report_bad, write_atomic
from flywheel.verifiers.envs import env_names  # discovery only: no env is imported


@app.command()
def generate(
    env: str = typer.Option("tool_call", help=f"Environment whose seeds to vary: {' | '.join(env_names())}."),
    n: int = typer.Option(..., "--n", help="Accepted rows wanted (train + held-out)."),
    seed: int = typer.Option(0, help="Run seed; every row seed derives from it."),
    out: Path = typer.Option(..., help="Output root: the version lands in OUT/NAME/VERSION/."),
    backend: str = typer.Option("sampler", help="sampler | transformers | vllm | openai"),
    model: str = typer.Option(None, help="Checkpoint folder (transformers, vllm) or model name (openai)."),
    base_url: str = typer.Option(None, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1"),
    workers: int = typer.Option(2, help="Dask LocalCluster workers (ignored with --dask-address)."),
    dask_address: str = typer.Option(None, help="Scheduler address of a running Dask cluster."),
    name: str = typer.Option(None, help="Dataset name (default: ENV)."),
    heldout_fraction: float = typer.Option(0.2, help="Share of rows held out, per tool."),
    threshold: float = typer.Option(0.8, help="Jaccard threshold of the near-duplicate stage."),
    max_candidates: int = typer.Option(None, help="Candidate budget (default 5*N+100)."),
    max_tool_share: float = typer.Option(0.25, help="Quality gate: no tool may hold a larger share of the rows."),
    parent: list[Path] = typer.Option([], help="Earlier published version folder(s) to dedupe against."),
    cache_dir: Path = typer.Option(None, help="Stage cache (default OUT/.cache)."),
    seeds_dir: Path = typer.Option(None, help="Folder with ENV.jsonl seeds and ENV.tools.json "
                                              "(default: the env's own folder, verifiers/envs/ENV/)."),
) -> None:
    """Generate, validate, deduplicate, split and publish a dataset version; prints its folder."""
    from flywheel.flows.config import GenerateConfig

    try:
        config = GenerateConfig(env=env, n=n, seed=seed, out=str(out), backend=backend, model=model, base_url=base_url,
                                workers=workers, dask_address=dask_address, name=name, max_candidates=max_candidates,
                                heldout_fraction=heldout_fraction, threshold=threshold, max_tool_share=max_tool_share,
                                parents=tuple(str(p) for p in parent), cache_dir=str(cache_dir) if cache_dir else None,
                                **({"seeds_dir": str(seeds_dir)} if seeds_dir else {}))
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
    trajectories: Path = typer.Option(..., help="JSONL of production trajectories (OpenAI chat format)."),
    dataset: Path = typer.Option(..., help="Published dataset version to extend (OUT/NAME/VERSION)."),
    threshold: float = typer.Option(0.8, help="MinHash Jaccard at which a new task is a near duplicate."),
) -> None:
    """Re-score production trajectories, bucket the failures, add them as held-out regression tasks (new version)."""
    from flywheel.flows.ingest import IngestConfig, ingest_trajectories
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
    threshold: float = typer.Option(0.8, help="Jaccard threshold (0, 1]."),
    ngram: int = typer.Option(3, help="Shingle size."),
    unit: str = typer.Option("word", help="word | char"),
) -> None:
    """Near-duplicate detection (MinHash LSH) on any JSONL file; the first row of a cluster is kept."""
    from flywheel.tasks.data.dedupe import MAX_TEXT_CHARS, NearDupParams, near_duplicates

    try:
        params = NearDupParams(threshold=threshold, ngram=ngram, unit=unit)  # type: ignore[arg-type]
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

