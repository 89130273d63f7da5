"""Bench: the whole dataset flow on N rows (default 100,000) with the sampler backend.

Reports wall time, the fixed start-up (temporary Prefect API + Dask cluster) on its own, the stage
work and the orchestration overhead (Prefect task machinery + Dask beyond the partition functions).
Run: .venv/bin/python bench/scripts/flow_100k.py [N] [WORKERS]
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def main() -> None:
    from flywheel.flows.config import GenerateConfig
    from flywheel.flows.generate import run_generate

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    out = tempfile.mkdtemp(prefix="flywheel-bench-")
    try:
        t0 = time.perf_counter()
        s = run_generate(GenerateConfig(out=out, n=n, seed=1, workers=workers))
        total = time.perf_counter() - t0
        again0 = time.perf_counter()
        cached = run_generate(GenerateConfig(out=out, n=n, seed=1, workers=workers))
        rerun = time.perf_counter() - again0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    t = s["timings"]
    inside = sum(t[f"{k}_s"] for k in ("generate", "exact_dedupe", "validate", "near_dedupe"))
    walls = t["task_wall_s"]
    prefect_overhead = sum(walls.values()) - inside - (walls["quality-suite"] + walls["split-decontaminate"]) \
        + 0.0  # quality and split tasks run inline: their wall is stage work plus Prefect's share
    stage_work = inside - t["dask_overhead_s"] + walls["quality-suite"] + walls["split-decontaminate"]
    glue = t["flow_s"] - t["startup_cluster_s"] - sum(walls.values())
    orchestration = max(prefect_overhead, 0.0) + t["dask_overhead_s"]
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "command": f".venv/bin/python bench/scripts/flow_100k.py {n} {workers}",
        "rows": s["counts"], "candidates": s["candidates"],
        "wall_s": round(total, 2),
        "startup_temporary_api_s": round(total - t["flow_s"], 2),
        "startup_dask_cluster_s": round(t["startup_cluster_s"], 2),
        "stage_task_wall_s": {k: round(v, 2) for k, v in walls.items()},
        "stage_work_s": round(stage_work, 2),
        "prefect_overhead_s": round(prefect_overhead, 3),
        "dask_overhead_s": round(t["dask_overhead_s"], 3),
        "flow_glue_s (reading reject files, selection; our code outside tasks)": round(glue, 2),
        "orchestration_overhead_share": round(orchestration / stage_work, 4),
        "cached_rerun_wall_s": round(rerun, 2), "cached_stages": cached["cache_hits"],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
