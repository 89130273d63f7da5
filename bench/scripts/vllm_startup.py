"""Bench: vLLM start-up and throughput on CPU, the configuration before issue 15 against the new one, and
transformers on the same prompts, in one run.

vLLM configurations (environment of the .venv-vllm worker, read by ``backends.VLLMBackend``):
- ``old``: what the backend did before: vLLM's defaults (torch.compile with its AOT artifact cache, fp32 checkpoint
  cast to bf16, engine core and model worker in two more processes);
- ``compiled`` (the new default): torch.compile reusing inductor's caches, fp32, engine in the worker's process;
- ``eager``: the same without compilation; ``compiled_no_prefix_cache``: prefix caching off, for its effect.
Start-up: seconds from launching the worker to its READY line. ``cold`` starts with an empty compile cache folder
(``VLLM_CACHE_ROOT`` in a temporary folder), ``warm`` starts again on the folder the cold start filled. Throughput:
the eval prompts of 32 tool_call tasks (``generation_throughput.requests``), greedy, up to 64 new tokens, all in one
call, once, on a fresh engine (its prefix cache empty). Prints JSON and writes bench/results/data/vllm_startup.json.
Run: .venv/bin/python bench/scripts/vllm_startup.py   (about 15 minutes on 2 cores; needs .venv-vllm)
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from generation_throughput import requests

from flywheel.tasks.inference.models import resolve_model
from flywheel.tasks.inference.policy import make_backend
from flywheel.tasks.inference.protocol import Generation, Request, Sampling
from flywheel.tasks.inference.vllm_worker import VLLMWorker

N, MAX_TOKENS = 32, 64
SAMPLING = Sampling(temperature=0.0, top_p=1.0, max_tokens=MAX_TOKENS)
CONFIGS: dict[str, dict[str, str]] = {
    "old": {"FLYWHEEL_VLLM_COMPILE": "compiled", "FLYWHEEL_VLLM_DTYPE": "auto", "VLLM_USE_AOT_COMPILE": "1",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
    "compiled": {"FLYWHEEL_VLLM_COMPILE": "compiled"},
    "eager": {"FLYWHEEL_VLLM_COMPILE": "eager"},
    "compiled_no_prefix_cache": {"FLYWHEEL_VLLM_COMPILE": "compiled", "FLYWHEEL_VLLM_PREFIX_CACHE": "0"},
}
# set by the backend unless already set: cleared so that each configuration gets exactly its own
OWNED = ("FLYWHEEL_VLLM_COMPILE", "FLYWHEEL_VLLM_DTYPE", "FLYWHEEL_VLLM_PREFIX_CACHE", "VLLM_USE_AOT_COMPILE",
         "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR")


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ (the worker copies it at launch), the other OWNED names unset; restored after."""
    saved = {k: os.environ.get(k) for k in OWNED}
    for k in OWNED:
        os.environ.pop(k, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def throughput(gens: Sequence[Generation], wall: float) -> dict[str, Any]:
    tokens = sum(g.completion_tokens for g in gens)
    return {"gen_wall_s": round(wall, 2), "completion_tokens": tokens,
            "prompt_tokens": sum(g.prompt_tokens for g in gens), "tokens_per_s": round(tokens / wall, 1),
            "rollouts_per_s": round(len(gens) / wall, 3),
            "texts_sha256": hashlib.sha256(json.dumps([g.text for g in gens]).encode()).hexdigest()[:16]}


def start(checkpoint: str, env: dict[str, str]) -> tuple[VLLMWorker, float]:
    with environment(env):
        t0 = time.perf_counter()
        worker = VLLMWorker(checkpoint)
        return worker, round(time.perf_counter() - t0, 1)


def measure(name: str, checkpoint: str, reqs: list[Request], cache: Path, cold: bool) -> dict[str, Any]:
    """A cold start (closed at once) when ``cold``, then a warm start on the same cache folder with the throughput."""
    env = CONFIGS[name] | {"VLLM_CACHE_ROOT": str(cache)}
    out: dict[str, Any] = {"env": CONFIGS[name]}
    if cold:
        worker, out["cold_start_s"] = start(checkpoint, env)
        worker.close()
    worker, out["warm_start_s" if cold else "start_s"] = start(checkpoint, env)
    t0 = time.perf_counter()
    gens = worker.generate(reqs, SAMPLING)
    out |= throughput(gens, time.perf_counter() - t0)
    worker.close()
    print(name, json.dumps(out), flush=True)
    return out


def transformers(reqs: list[Request]) -> dict[str, Any]:
    t0 = time.perf_counter()
    backend = make_backend("transformers", None, batch_size=16)
    load_s = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    gens = backend.generate(reqs, SAMPLING)
    out = {"load_s": load_s, "batch_size": 16} | throughput(gens, time.perf_counter() - t0)
    print("transformers", json.dumps(out), flush=True)
    return out


def machine() -> dict[str, Any]:
    mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "mem_gib": round(int(mem.split()[1]) / 2**20, 1), "gpu": None}


def main() -> None:
    checkpoint, reqs = str(resolve_model(None)), requests(N)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
        for name in ("old", "compiled"):
            results[name] = measure(name, checkpoint, reqs, Path(tmp) / name, cold=True)
        results["eager"] = measure("eager", checkpoint, reqs, Path(tmp) / "eager", cold=False)
        # on the compiled folder: warm, so only the prefix cache differs from "compiled"
        results["compiled_no_prefix_cache"] = measure("compiled_no_prefix_cache", checkpoint, reqs,
                                                      Path(tmp) / "compiled", cold=False)
    results["transformers"] = transformers(reqs)
    record = {"machine": machine(), "command": "python bench/scripts/vllm_startup.py",
              "model": "embedded SmolLM2-135M-Instruct (fp32 safetensors)", "requests": N, "max_tokens": MAX_TOKENS,
              "sampling": "greedy", "load_avg_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
              "total_s": round(time.perf_counter() - t0), "results": results}
    print(json.dumps(record, indent=2))
    out = Path(__file__).resolve().parents[1] / "results" / "data" / "vllm_startup.json"
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
