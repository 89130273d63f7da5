"""Bench: the code sandbox's verifications per second, one at a time and as a ``code_reward`` batch (8 at once).

Run: .venv/bin/python bench/scripts/sandbox_throughput.py [N] [ROUNDS]
The same pairs as bench/scripts/verifier_throughput.py (half reference solutions, half wrong, malformed or raising).
Each round measures both modes; the machine's load average is printed beside each round, because the
sandbox's start-up (two bwraps and a Python) is what is measured and other work on the cores slows it.
Compare old and new code with the same command:
``cd OLD && PYTHONPATH=OLD python NEW/bench/scripts/sandbox_throughput.py``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verifier_throughput import pairs_for, rate  # noqa: E402

from flywheel.verifiers import get_verifier  # noqa: E402


def batch_rate(pairs: list) -> float:
    start = time.perf_counter()
    get_verifier("code").code_reward([c for _, c in pairs], task=[t for t, _ in pairs])
    return len(pairs) / (time.perf_counter() - start)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    pairs = pairs_for("code", n)
    rows = []
    for _ in range(rounds):
        one = rate("code", pairs)
        batch = batch_rate(pairs)
        rows.append({"one_at_a_time": round(one, 1), "batch_8": round(batch, 1), "load_1min": os.getloadavg()[0]})
    print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                      "code": str(Path(get_verifier("code").__file__).resolve().parents[2]),
                      "command": f"python bench/scripts/sandbox_throughput.py {n} {rounds}", "rounds": rows,
                      "median": {"one_at_a_time": statistics.median(r["one_at_a_time"] for r in rows),
                                 "batch_8": statistics.median(r["batch_8"] for r in rows)}}, indent=2))


if __name__ == "__main__":
    main()
