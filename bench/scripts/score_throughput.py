"""Bench: tool_call verifier throughput on one core.

Measures verify() on parsed tasks (the reward-function hot path in training and evaluation) and the
whole `flywheel score` command (read JSONL, parse Task, verify, write JSONL) on the same rows.
The completions mix full, partial, wrong-tool, unsafe and malformed answers.
Run: .venv/bin/python bench/scripts/score_throughput.py [N]
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flywheel.schemas import Task
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools
from flywheel.tasks.data.validate import reference_completion
from flywheel.verifiers.envs.tool_call.tool_call import verify


def completions(task: Task, i: int) -> str:
    call = task.reference.calls[0]
    kind = i % 5
    if kind == 0:
        return reference_completion(task)
    if kind == 1:
        return json.dumps({"tool": call.tool, "args": {**call.args, "extra": 1}})
    if kind == 2:
        return json.dumps({"tool": task.tools[-1].name, "args": call.args})
    if kind == 3:
        return "Sure! " + reference_completion(task)
    return json.dumps({"tool": call.tool, "args": {k: "x" for k in call.args}})


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    seeds_path, tools_path = env_paths("tool_call")
    tools = load_tools(tools_path)
    rows, _ = generate_candidates(range(2000), load_seeds(seeds_path, tools), tools, 1)
    tasks = [Task.model_validate_json(r["task"]) for r in rows]
    pairs = [(tasks[i % len(tasks)], completions(tasks[i % len(tasks)], i)) for i in range(n)]
    start = time.perf_counter()
    for task, completion in pairs:
        verify(task, completion)
    t_verify = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "rows.jsonl"
        src.write_text("".join(json.dumps({"task": t.model_dump(mode="json"), "completion": c}) + "\n"
                               for t, c in pairs))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "flywheel.flows.cli", "score", "--verifier", "tool_call",
                        "--input", str(src),
                        "--output", str(Path(tmp) / "out.jsonl")], check=True, capture_output=True)
        t_cli = time.perf_counter() - start
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": f".venv/bin/python bench/scripts/score_throughput.py {n}",
        "completions": n,
        "verify_per_second_one_core": round(n / t_verify),
        "flywheel_score_cli_per_second_one_core (incl. start-up, JSON and Task parsing, writing)": round(n / t_cli),
    }, indent=2))


if __name__ == "__main__":
    main()
