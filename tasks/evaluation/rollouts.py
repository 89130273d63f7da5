"""Rollouts of a policy on tasks, scored by the task's verifier: one row per (task, sample).

Contract:
- ``plan(task_ids, samples, run_seed)`` lists (task index, sample, seed) in task order; each rollout's seed is
  H(run_seed, task id, sample), so a rollout's seed never depends on batching, limits or resumption.
- ``run_batch`` generates and scores one batch: single-turn envs in one backend call, multi-turn envs (workplace)
  as agent episodes in a fresh in-process session each, run in lockstep so that each step of the batch's
  episodes is one backend call (``tasks.agents.agent.run_episodes``). Rows carry the completion (the trajectory's
  JSON for workplace), the verdict, latency, tokens and the outcome flags of ``tasks.metrics``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl

from flywheel.schemas import Task, Verdict
from flywheel.tasks.agents.agent import BackendPolicies, LocalEnv, openai_tools, run_episodes
from flywheel.tasks.evaluation.metrics import outcome
from flywheel.tasks.inference.policy import Backend, Request, Sampling, completion_text
from flywheel.verifiers import get_verifier
from flywheel.verifiers.envs import get_env

ROLLOUT_SCHEMA = {
    "task_id": pl.String, "env": pl.String, "tool": pl.String, "sample": pl.Int64, "seed": pl.Int64,
    "prompt": pl.String, "completion": pl.String, "reward": pl.Float64, "valid": pl.Boolean,
    "failure_class": pl.String, "details": pl.String, "verdict": pl.String, "success": pl.Boolean,
    "bucket": pl.String, "valid_output": pl.Boolean, "correct_tool": pl.Boolean, "correct_args": pl.Boolean,
    "execution_success": pl.Boolean, "unsafe": pl.Boolean, "latency_s": pl.Float64, "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64, "finish_reason": pl.String, "steps": pl.Int64,
}


def rollout_seed(run_seed: int, task_id: str, sample: int) -> int:
    digest = hashlib.sha256(f"{run_seed}:{task_id}:{sample}".encode()).hexdigest()
    return int(digest[:8], 16) & 0x7FFFFFFF  # fits every backend's seed type


def plan(task_ids: Sequence[str], samples: int, run_seed: int) -> list[tuple[int, int, int]]:
    return [(i, s, rollout_seed(run_seed, tid, s)) for i, tid in enumerate(task_ids) for s in range(samples)]


def _row(task: Task, tool: str, sample: int, seed: int, completion: str, verdict: Verdict, latency: float,
         tokens: tuple[int, int], finish: str, steps: int, flags: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": task.id, "env": task.env, "tool": tool, "sample": sample, "seed": seed, "prompt": task.prompt,
            "completion": completion, "reward": verdict.reward, "valid": verdict.valid,
            "failure_class": verdict.failure_class, "details": verdict.details,
            "verdict": verdict.model_dump_json(), "latency_s": latency, "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1], "finish_reason": finish, "steps": steps, **flags}


def _single_turn(backend: Backend, items: list[tuple[Task, str, int, int]], sampling: Sampling,
                 threshold: float) -> list[dict[str, Any]]:
    requests = [Request([m.model_dump(exclude_none=True) for m in t.messages], openai_tools(t), seed,
                        label=f"task {t.id}") for t, _, _, seed in items]
    gens = backend.generate(requests, sampling)
    texts = [completion_text(g) for g in gens]

    def score(pair: tuple[tuple[Task, str, int, int], str]) -> Verdict:
        task = pair[0][0]
        return get_verifier(task.env).verify(task, pair[1])

    with ThreadPoolExecutor(8) as pool:  # the code verifier waits on sandboxes; the others are fast anyway
        verdicts = list(pool.map(score, zip(items, texts)))
    return [_row(t, tool, s, seed, text, v, g.latency_s, (g.prompt_tokens, g.completion_tokens), g.finish_reason, 1,
                 outcome(t.env, v, threshold))
            for (t, tool, s, seed), text, v, g in zip(items, texts, verdicts, gens)]


def _episodes(backend: Backend, items: list[tuple[Task, str, int, int]], sampling: Sampling, threshold: float,
              max_steps: int) -> list[dict[str, Any]]:
    policy = BackendPolicies(backend, sampling, [seed for *_, seed in items], [f"task {t.id}" for t, *_ in items])
    episodes = run_episodes(policy, LocalEnv(), [t for t, *_ in items], max_steps=max_steps,
                            max_tokens=sampling.max_tokens * max_steps)
    rows = []
    for (task, tool, sample, seed), ep, gens in zip(items, episodes, policy.generations, strict=True):
        trajectory = ep.messages[len(task.messages):]
        called = frozenset(c["function"]["name"] for m in trajectory for c in m.get("tool_calls") or [])
        flags = outcome(task.env, ep.verdict, threshold, ep.stop_reason, called,
                        frozenset(c.tool for c in task.reference.calls))
        tokens = (sum(g.prompt_tokens for g in gens), sum(g.completion_tokens for g in gens))
        rows.append(_row(task, tool, sample, seed, json.dumps(trajectory), ep.verdict, sum(g.latency_s for g in gens),
                         tokens, ep.stop_reason, ep.steps, flags))
    return rows


def run_batch(backend: Backend, items: list[tuple[Task, str, int, int]], sampling: Sampling, threshold: float,
              max_steps: int) -> list[dict[str, Any]]:
    """Rows for (task, tool label, sample, seed) items, in their order."""
    single = [it for it in items if not get_env(it[0].env).multi_turn]
    rows = {(r["task_id"], r["sample"]): r
            for r in (_single_turn(backend, single, sampling, threshold) if single else [])}
    multi = [it for it in items if get_env(it[0].env).multi_turn]
    for r in _episodes(backend, multi, sampling, threshold, max_steps) if multi else []:
        rows[(r["task_id"], r["sample"])] = r
    return [rows[(t.id, s)] for t, _, s, _ in items]
