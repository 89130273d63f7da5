"""Bench: what vLLM's n-gram speculation (FLYWHEEL_VLLM_NGRAM=4) does to batched calls, against the plain engine, on
the same 48 tool_call held-out prompts (embedded model): one greedy call of 48 (96 tokens) and 16 samples at
temperature 1 (64 tokens), seconds and how many texts match.
Run: .venv/bin/python bench/scripts/vllm_ngram_check.py DATASET"""

import json
import os
import sys
import time
from pathlib import Path

import polars as pl

from flywheel.schemas import Task
from flywheel.tasks.agents.agent import openai_tools
from flywheel.tasks.inference.policy import start_vllm
from flywheel.tasks.inference.protocol import Request, Sampling

CK = "/root/.cache/flywheel/smollm2-135m-instruct"
tasks = [Task.model_validate_json(t) for t in pl.read_parquet(Path(sys.argv[1]) / "heldout.parquet")["task"][:48]]
reqs = [Request([m.model_dump(exclude_none=True) for m in t.messages], openai_tools(t), 7 + i)
        for i, t in enumerate(tasks)]
out = {}
for k in ("0", "4"):
    os.environ["FLYWHEEL_VLLM_NGRAM"] = k
    engine = start_vllm(CK, 0.1)
    t0 = time.time()
    greedy = engine.generate(reqs, Sampling(0.0, 1.0, 96))
    t1 = time.time()
    sampled = engine.generate(reqs[:16], Sampling(1.0, 1.0, 64))
    t2 = time.time()
    engine.close()
    out[k] = {"greedy": [x.text for x in greedy], "sampled": [x.text for x in sampled], "greedy_s": round(t1 - t0, 2),
              "sampled_s": round(t2 - t1, 2)}
print(json.dumps({"greedy_identical": sum(a == b for a, b in zip(out["0"]["greedy"], out["4"]["greedy"])), "of": 48,
                  "sampled_identical": sum(a == b for a, b in zip(out["0"]["sampled"], out["4"]["sampled"])),
                  "of_sampled": 16, "seconds": {k: (v["greedy_s"], v["sampled_s"]) for k, v in out.items()}}))
