"""Runtime plumbing for flows: the Dask client, partition fan-out, stage files, progress.

Contract:
- ``fan_out(fn, parts)`` maps a pure partition function over a few large
  partitions on the current Dask client (LocalCluster or a scheduler address)
  and returns results in partition order, so output never depends on the
  number of workers. Without a client it runs in process.
- Stage files are parquet under the cache folder, named by a hash of the stage
  and its inputs, written atomically.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

ROW_SCHEMA = {
    "k": pl.Int64, "id": pl.String, "env": pl.String, "seed_id": pl.String, "category": pl.String,
    "tool": pl.String, "prompt": pl.String, "row_seed": pl.Int64, "task": pl.String,
}
REJECT_SCHEMA = {**ROW_SCHEMA, "stage": pl.String, "reason": pl.String, "detail": pl.String}

CODE_DIRS = ("flows", "tasks", "verifiers", "schemas")
_client: Any = None
_progress: Callable[[str, int, int], None] = lambda stage, done, total: None


def set_progress(callback: Callable[[str, int, int], None] | None) -> None:
    """The CLI installs a rich progress bar here; flows call ``progress``."""
    global _progress
    _progress = callback or (lambda stage, done, total: None)


def progress(stage: str, done: int, total: int) -> None:
    _progress(stage, done, total)
    _progress_artifact(stage, done, total)


_artifacts: dict[tuple[str, str], Any] = {}


def link_artifacts(key: str, files: dict[str, str | Path]) -> None:
    """Link artifacts (file:// URIs) to a run's reports and plots, keyed KEY-LABEL, so the UI points at them."""
    from prefect.artifacts import create_link_artifact

    for label, path in files.items():
        slug = "".join(c if c.isalnum() else "-" for c in f"{key}-{label}".lower())
        create_link_artifact(Path(path).resolve().as_uri(), link_text=Path(path).name, key=slug,
                             description=f"{label}: {path}")


def _progress_artifact(stage: str, done: int, total: int) -> None:
    """Inside a flow run, a Prefect progress artifact per stage, so a person watching the UI sees long work move."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None or total <= 0:
        return
    key = (str(ctx.flow_run.id), stage)
    pct = round(100.0 * min(done, total) / total, 1)
    if key not in _artifacts:
        _artifacts[key] = create_progress_artifact(pct, description=f"{stage}: {done}/{total}")
    else:
        update_progress_artifact(_artifacts[key], pct, description=f"{stage}: {done}/{total}")


@contextmanager
def dask_client(workers: int, address: str | None) -> Generator[Any, None, None]:
    """A Dask client for the flow's CPU stages: a scheduler address, or a LocalCluster."""
    global _client
    from distributed import Client, LocalCluster

    from flywheel.flows.dask_plugins import QuietWorker

    for name in ("distributed", "great_expectations"):  # their INFO lines drown the progress bar
        logging.getLogger(name).setLevel(logging.WARNING)
    environ = dict(os.environ)
    if address:
        client = Client(address, timeout="30s")
        cluster = None
    else:
        with warnings.catch_warnings():  # the scheduler's HTTP server (no dashboard) wants 127.0.0.1:8787 and
            warnings.filterwarnings("ignore", message="Port 8787 is already in use")  # takes another when busy
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(cluster)
        client.register_plugin(QuietWorker(), name="flywheel-quiet-worker")
    _restore(environ)
    _client = client
    try:
        yield client
    finally:
        _client = None
        with _quiet("distributed", logging.ERROR):  # on a busy machine the nanny kills a slow exit: not news
            client.close()
            if cluster is not None:
                cluster.close()
        _restore(environ)


@contextmanager
def _quiet(name: str, level: int) -> Generator[None, None, None]:
    logger = logging.getLogger(name)
    old = logger.level
    logger.setLevel(max(old, level))
    try:
        yield
    finally:
        logger.setLevel(old)


def _restore(environ: dict[str, str]) -> None:
    """Put back this process's environment. Dask's nanny sets its workers' variables (OMP_NUM_THREADS=1,
    MKL_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_, PYTHONHASHSEED, ...) in the parent's os.environ before spawning them
    (dask/distributed#6681), so every process started after the dataset flow (the vLLM worker, a torch imported
    later) ran on one thread, and vLLM evals in `flywheel run` ran slower than standalone."""
    for key in set(os.environ) - set(environ):
        del os.environ[key]
    os.environ.update(environ)


def _timed(fn: Callable[[Any], Any], part: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(part)
    return result, time.perf_counter() - start


_dask_overhead = [0.0]


def dask_overhead() -> float:
    """Seconds spent in fan-outs beyond the partition functions' ideal parallel time (for bench/)."""
    return _dask_overhead[0]


def fan_out(fn: Callable[[Any], Any], parts: Sequence[Any], stage: str) -> tuple[list[Any], float]:
    """Results of ``fn`` per partition (in order) and the summed function seconds."""
    from functools import partial

    start = time.perf_counter()
    total = len(parts)
    progress(stage, 0, total)
    if _client is None or total == 0:
        out = []
        for i, part in enumerate(parts):
            out.append(_timed(fn, part))
            progress(stage, i + 1, total)
    else:
        from distributed import as_completed

        futures = _client.map(partial(_timed, fn), list(parts), pure=False)
        for i, _ in enumerate(as_completed(futures)):
            progress(stage, i + 1, total)
        out = _client.gather(futures)
        workers = max(1, min(len(_client.scheduler_info().get("workers", {})), total))
        ideal = max(sum(s for _, s in out) / workers, max(s for _, s in out))
        _dask_overhead[0] += max(0.0, time.perf_counter() - start - ideal)
    return [r for r, _ in out], sum(s for _, s in out)


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def stage_path(cache: Path, stage: str, inputs: dict[str, Any], suffix: str = ".parquet") -> Path:
    key = hashlib.sha256(json.dumps({"stage": stage, **inputs}, sort_keys=True, default=str).encode()).hexdigest()
    return cache / "stages" / f"{stage}-{key[:20]}{suffix}"


def write_rows(rows: list[dict[str, Any]] | pl.DataFrame, path: Path, schema: dict[str, Any]) -> str:
    """Write rows (only the schema's columns, in order) atomically; return the path."""
    from flywheel.tasks.files import open_output

    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(rows, pl.DataFrame):
        df = rows.select(list(schema)).cast(pl.Schema(schema))
    else:
        df = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    with open_output(path) as f:  # a unique temp file, removed if the write fails
        df.write_parquet(f)
    return str(path)


def read_rows(path: str | None) -> list[dict[str, Any]]:
    return pl.read_parquet(path).to_dicts() if path else []


def reason_counts(reject_files: list[str]) -> dict[str, int]:
    """Rejected rows per ``stage:reason`` over reject files."""
    if not reject_files:
        return {}
    frame = pl.concat([pl.read_parquet(p, columns=["stage", "reason"]) for p in reject_files])
    counts = frame.group_by("stage", "reason").len().rows()
    return dict(sorted((f"{stage}:{reason}", n) for stage, reason, n in counts))


def files_hash(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def code_version() -> str:
    """Package version plus a hash of every source file the stages run: part of every cache key. Once per process:
    the code that runs is what was imported, whatever is edited on disk meanwhile (an eval started before an edit
    and the one after, in one `flywheel run`, are of the same code)."""
    from flywheel.flows import __version__

    root = Path(__file__).resolve().parents[1]
    sources = sorted(p for d in CODE_DIRS for p in (root / d).rglob("*.py"))
    return f"{__version__}+{files_hash(sources)[:12]}"
