"""Bench: sql verifications per second on one core (generated tasks, half reference queries, half wrong or hostile).

Run: taskset -c 0 .venv/bin/python bench/scripts/sql_throughput.py [N]
Each task is verified twice (a GRPO group repeats its task): the first sight of a task also runs the reference on
the shown and the held-back tables (cached per task in the worker). The bounded worker's start is not counted.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

from flywheel.schemas import SeedTask, Task
from flywheel.tasks.data.generate import generate_candidates
from flywheel.verifiers.envs import get_env

WRONG = ["```sql\nSELECT COUNT(*) FROM {table}\n```", "SELECT * FROM {table} ORDER BY 1", "SELEC nothing",
         "DELETE FROM {table}", "SELECT 42", "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
         "SELECT COUNT(*) FROM r"]


def pairs_for(n: int) -> list[tuple[Task, str]]:
    spec = get_env("sql")
    seeds = [SeedTask.model_validate({**json.loads(line), "env": "sql"})
             for line in spec.seeds_path.read_text(encoding="utf-8").splitlines()]
    rows, _ = generate_candidates(range(n // 2), seeds, {}, 1)
    tasks = [Task.model_validate_json(r["task"]) for r in rows]
    pairs = []
    for i in range(n):
        task = tasks[(i // 2) % len(tasks)]
        table = next(iter(task.reference.state or {}))
        wrong = WRONG[(i // 2) % len(WRONG)].format(table=table)
        pairs.append((task, spec.reference_completion(task) if i % 2 == 0 else wrong))
    return pairs


def main(n: int) -> dict[str, object]:
    spec = get_env("sql")
    pairs = pairs_for(n)
    spec.verify(pairs[0][0], "SELECT 1")  # start the bounded worker (not counted)
    start = time.perf_counter()
    verdicts = [spec.verify(task, completion) for task, completion in pairs]
    seconds = time.perf_counter() - start
    classes: dict[str, int] = {}
    for v in verdicts:
        classes[str(v.failure_class)] = classes.get(str(v.failure_class), 0) + 1
    return {"n": n, "seconds": round(seconds, 2), "verifications_per_s": round(n / seconds, 1),
            "failure_classes": classes, "cpus_allowed": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "machine": platform.machine()}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000), indent=1))
