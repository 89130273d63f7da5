"""Bench: policy generation throughput, transformers vs vLLM, same model, same prompts, same sampling.

The prompts are the eval prompts of N tool_call tasks (system prompt + rendered tool catalog + request), each
with its rollout seed; sampling at temperature 0.7, top-p 0.95, up to T new tokens. Reported per backend:
model load seconds, then generation wall seconds, completion tokens per second and rollouts per second (best of
R repeats after one warm-up batch). transformers runs batches of 16 in this process; vLLM runs all prompts in
one ``LLM.chat`` call, in process in the .venv-vllm worker (``tasks/vllm_worker.py``) unless vllm imports here.
Run: .venv/bin/python bench/scripts/generation_throughput.py [N] [T] [R] [backend ...]
(writes bench/results/data/generation_throughput.json)
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from flywheel.tasks.agents.agent import openai_tools
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools
from flywheel.tasks.evaluation.rollouts import rollout_seed
from flywheel.tasks.inference.policy import Request, Sampling, make_backend


def requests(n: int) -> list[Request]:
    seeds_path, tools_path = env_paths("tool_call")
    tools = load_tools(tools_path)
    rows, _ = generate_candidates(range(n), load_seeds(seeds_path, tools), tools, 11)
    from flywheel.schemas import Task

    tasks = [Task.model_validate_json(r["task"]) for r in rows]
    return [Request([m.model_dump(exclude_none=True) for m in t.messages], openai_tools(t), rollout_seed(0, t.id, 0))
            for t in tasks]


def measure(kind: str, reqs: list[Request], sampling: Sampling, repeats: int) -> dict:
    t0 = time.perf_counter()
    backend = make_backend(kind, None, batch_size=16)
    load_s = time.perf_counter() - t0
    backend.generate(reqs[:4], sampling)  # warm-up
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        gens = backend.generate(reqs, sampling)
        wall = time.perf_counter() - t0
        if best is None or wall < best[0]:
            best = (wall, gens)
    wall, gens = best  # type: ignore[misc]
    tokens = sum(g.completion_tokens for g in gens)
    return {"load_s": round(load_s, 2), "wall_s": round(wall, 2), "completion_tokens": tokens,
            "prompt_tokens": sum(g.prompt_tokens for g in gens), "tokens_per_s": round(tokens / wall, 1),
            "rollouts_per_s": round(len(gens) / wall, 3), "repeats": repeats,
            "texts_sha256": hashlib.sha256(json.dumps([g.text for g in gens]).encode()).hexdigest()[:16]}


def main() -> None:
    n, t, r = (int(a) for a in (sys.argv[1:4] + ["64", "64", "2"][len(sys.argv[1:4]):]))
    kinds = sys.argv[4:] or ["transformers", "vllm"]
    reqs, sampling = requests(n), Sampling(temperature=0.7, top_p=0.95, max_tokens=t)
    out = Path(__file__).resolve().parents[1] / "results" / "data" / "generation_throughput.json"
    earlier = json.loads(out.read_text())["results"] if out.is_file() else {}
    # a rerun of one backend keeps the other
    results = {**earlier, **{kind: measure(kind, reqs, sampling, r) for kind in kinds}}
    record = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()},
              "command": f"python bench/scripts/generation_throughput.py {n} {t} {r} BACKEND "
                         "(each backend run on an idle machine)",
              "model": "embedded SmolLM2-135M-Instruct (fp32 safetensors)", "requests": n, "max_tokens": t,
              "results": results}
    print(json.dumps(record, indent=2))
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
