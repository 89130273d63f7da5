"""Bench: workplace agent episodes one at a time (the old path: ``run_episode`` per task, each step a batch of one)
against lockstep (``run_episodes``: each step of all episodes under way is one batched backend call), and lockstep on
vLLM, same model, same tasks, same seeds, in one run.

1. eval: the first N held-out tasks of a workplace dataset as ``flywheel eval`` runs them (greedy, up to 6 steps of
   T tokens; batches of 16 on transformers, one call of all N a step on vLLM, as ``flywheel eval`` groups vLLM
   calls), episodes/s, success, and how many trajectories are the same text as the old path's (a batch computes in
   other shapes than a batch of one, and vLLM in bf16, so a near-tie of greedy logits may flip).
2. GRPO's generation phase on workplace: G episodes of one train task at temperature 1.0 (``token_episode`` G times;
   ``token_episodes`` of the G; the same on a vLLM engine synced to the policy, as ``--rollout-backend vllm``
   samples), mean seconds per group over S tasks.
The vLLM engines' start-up is timed apart (``start_s``), not in the rows.

Run: .venv/bin/python bench/scripts/agent_lockstep.py WORKPLACE_DATASET [MODEL] [N T G S]
(MODEL: an adapter or checkpoint folder, e.g. a workplace SFT adapter, so that episodes take several steps; writes
bench/results/data/agent_lockstep.json; the vLLM rows need .venv-vllm)
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from flywheel.schemas import Task
from flywheel.tasks.agents.agent import BackendPolicy, LocalEnv, run_episode
from flywheel.tasks.evaluation.rollouts import rollout_seed, run_batch
from flywheel.tasks.inference.backends import TransformersBackend
from flywheel.tasks.inference.hf import HFChatModel
from flywheel.tasks.inference.policy import vllm_available
from flywheel.tasks.inference.prefix_cache import PrefixStore
from flywheel.tasks.inference.protocol import Sampling
from flywheel.tasks.training.episodes import token_episode, token_episodes


def split(dataset: str, name: str, n: int) -> list[Task]:
    frame = pl.read_parquet(Path(dataset) / f"{name}.parquet").sort("id").head(n)
    return [Task.model_validate_json(t) for t in frame["task"]]


def bench_eval(model: HFChatModel, tasks: list[Task], max_tokens: int, lockstep: bool,
               backend: Any = None) -> tuple[dict, list[str]]:
    """``backend``: a vLLM engine (lockstep, one call of every episode under way per step), else transformers."""
    call = len(tasks) if backend else 16
    backend, greedy = backend or TransformersBackend(None, 16, loaded=model), Sampling(0.0, 1.0, max_tokens)
    model.store = PrefixStore()
    items = [(t, "", 0, rollout_seed(0, t.id, 0)) for t in tasks]
    t0, texts, wins, steps = time.perf_counter(), [], 0, 0
    if lockstep:
        for start in range(0, len(items), call):
            rows = run_batch(backend, items[start:start + call], greedy, 1.0, 6)
            texts += [r["completion"] for r in rows]
            wins += sum(bool(r["success"]) for r in rows)
            steps += sum(r["steps"] for r in rows)
    else:
        for task, _, _, seed in items:
            ep = run_episode(BackendPolicy(backend, greedy, seed), LocalEnv(), task, max_steps=6,
                             max_tokens=max_tokens * 6)
            texts.append(json.dumps(ep.messages[len(task.messages):]))
            wins += ep.verdict.reward == 1.0
            steps += ep.steps
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "episodes_per_s": round(len(items) / wall, 4),
            "success": round(wins / len(items), 3), "steps": steps}, texts


def bench_grpo(model: HFChatModel, tasks: list[Task], g: int, max_tokens: int, lockstep: bool,
               policy: Any = None) -> dict:
    """``policy``: a ``VLLMPolicy`` (lockstep on the engine), else the model in process."""
    walls, tokens = [], 0
    for i, task in enumerate(tasks):
        model.store = PrefixStore()  # an optimizer step empties the store: each GRPO step starts cold
        t0 = time.perf_counter()
        if lockstep:
            eps = token_episodes(policy or model, [task] * g, i, 1.0, 1.0, max_tokens, 6)
        else:
            eps = [token_episode(model, task, i * 1000 + k, 1.0, 1.0, max_tokens, 6) for k in range(g)]
        walls.append(time.perf_counter() - t0)
        tokens += sum(sum(e["env_mask"]) for e in eps)
    return {"group_generation_s": round(sum(walls) / len(walls), 2), "groups": len(walls), "episodes_per_group": g,
            "generated_tokens": tokens}


def bench_vllm(model: HFChatModel, model_ref: str | None, heldout: list[Task], train: list[Task], g: int,
               t: int) -> tuple[dict, list[str]]:
    """Lockstep on vLLM: eval on the engine ``flywheel eval --backend vllm`` loads (an adapter merged into its base),
    GRPO generation on the engine ``--rollout-backend vllm`` starts (the base, synced to the policy's weights)."""
    from flywheel.tasks.inference.models import adapter_base, embedded_checkpoint, is_adapter
    from flywheel.tasks.inference.policy import make_backend, release
    from flywheel.tasks.training.vllm_rollout import VLLMPolicy

    t0 = time.perf_counter()
    backend = make_backend("vllm", model_ref)
    start = {"eval_engine_start_s": round(time.perf_counter() - t0, 1)}
    out, texts = bench_eval(model, heldout, t, True, backend)
    release("vllm")
    ref = Path(model_ref) if model_ref else embedded_checkpoint()
    if is_adapter(ref):
        t0 = time.perf_counter()
        policy = VLLMPolicy(model, model.model, adapter_base(ref))
        policy.sync(0)
        start["grpo_engine_start_and_sync_s"] = round(time.perf_counter() - t0, 1)
        try:
            grpo = bench_grpo(model, train, g, t, True, policy)
        finally:
            policy.close()
    else:  # VLLMPolicy syncs a LoRA-trained model's weights: no adapter, no GRPO row
        grpo = {}
    return {"eval": out, "grpo": grpo, "start_s": start}, texts


def main() -> None:
    dataset = sys.argv[1]
    model_ref = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
    n, t, g, s = (int(a) for a in (sys.argv[3:7] + ["32", "96", "8", "2"][len(sys.argv[3:7]):]))
    model = HFChatModel(model_ref)
    model.generate([[{"role": "user", "content": "hi"}]], 0, 0.0, 1.0, 4)  # warm-up
    heldout, train = split(dataset, "heldout", n), split(dataset, "train", s)
    results: dict = {}
    texts = {}
    for label, lockstep in (("one_at_a_time", False), ("lockstep", True)):
        results[label] = {}
        results[label]["eval"], texts[label] = bench_eval(model, heldout, t, lockstep)
        results[label]["grpo"] = bench_grpo(model, train, g, t, lockstep)
    if vllm_available():
        results["vllm"], texts["vllm"] = bench_vllm(model, model_ref, heldout, train, g, t)
    old = results["one_at_a_time"]
    same = {k: f"{sum(a == b for a, b in zip(texts['one_at_a_time'], v))} of {len(heldout)}"
            for k, v in texts.items() if k != "one_at_a_time"}
    speedup = {k: {"eval_episodes_per_s": round(r["eval"]["episodes_per_s"] / old["eval"]["episodes_per_s"], 2),
                   "grpo_group_generation": round(old["grpo"]["group_generation_s"] / r["grpo"]["group_generation_s"],
                                                  2)}
               for k, r in results.items() if k != "one_at_a_time" and r["grpo"]}
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    record = {"machine": machine, "command": f"python bench/scripts/agent_lockstep.py {' '.join(sys.argv[1:])}",
              "model": model_ref or "embedded SmolLM2-135M-Instruct (fp32)", "speedup": speedup,
              "eval_trajectories_identical_to_old_path": same, "results": results}
    print(json.dumps(record, indent=2))
    out = Path(__file__).resolve().parents[1] / "results" / "data" / "agent_lockstep.json"
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
