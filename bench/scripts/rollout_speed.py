"""Bench: rollouts with shared-prefix KV reuse against the old path (every prompt prefilled whole), same model,
same prompts, same seeds, in one run (issue 15's three goals).

1. eval: ``flywheel eval``'s rollouts (``run_batch``: generation + scoring, batches of 16) on the first N held-out
   tasks of a tool_call dataset, embedded model, greedy, up to T new tokens: rollouts/s, and whether the texts match;
   then the same with 1 new token (``eval_prompt_only``: the prefill alone, where reuse saves compute).
2. GRPO generation phase: one step's 8 completions x 64 tokens of one prompt at temperature 1.0, as TRL's
   transformers path makes them (8 left-padded copies, ``_generate_plain``) and as ``tasks/training/rollout.py``
   makes them (one prefill shared by the 8); mean seconds per step over S prompts.
3. A workplace agent episode of 5 steps through ``run_episode`` with a real in-process session: at each step the
   model generates its reply (timed, up to 64 tokens), then the episode takes the task's reference call
   (teacher-forced, so every episode has exactly 5 steps whatever the 135M model answers) and the session's real
   observation; mean seconds of generation per episode over E tasks.

Run: .venv/bin/python bench/scripts/rollout_speed.py TOOL_CALL_DATASET WORKPLACE_DATASET [N T S E]
(writes bench/results/data/rollout_speed.json)
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import polars as pl

from flywheel.schemas import Task
from flywheel.tasks.agents.agent import LocalEnv, PolicyReply, openai_tools, run_episode
from flywheel.tasks.evaluation.rollouts import rollout_seed, run_batch
from flywheel.tasks.inference.backends import TransformersBackend
from flywheel.tasks.inference.hf import HFChatModel
from flywheel.tasks.inference.prefix_cache import PrefixStore
from flywheel.tasks.inference.protocol import Sampling, as_text_chat


def heldout(dataset: str, n: int) -> list[Task]:
    frame = pl.read_parquet(Path(dataset) / "heldout.parquet").sort("id").head(n)
    return [Task.model_validate_json(t) for t in frame["task"]]


def bench_eval(model: HFChatModel, tasks: list[Task], max_tokens: int) -> tuple[dict, list[str]]:
    backend, greedy = TransformersBackend(None, 16, loaded=model), Sampling(0.0, 1.0, max_tokens)
    model.store = PrefixStore()  # every measurement starts cold: reuse only within it
    items = [(t, "", 0, rollout_seed(0, t.id, 0)) for t in tasks]
    t0, rows = time.perf_counter(), []
    for start in range(0, len(items), 16):
        rows += run_batch(backend, items[start:start + 16], greedy, 1.0, 1)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "rollouts_per_s": round(len(rows) / wall, 3),
            "completion_tokens": sum(r["completion_tokens"] for r in rows),
            "success": round(sum(bool(r["success"]) for r in rows) / len(rows), 3)}, [r["completion"] for r in rows]


def bench_grpo(model: HFChatModel, tasks: list[Task], reuse: bool) -> dict:
    walls, tokens = [], 0
    for i, task in enumerate(tasks):
        chat = as_text_chat([m.model_dump(exclude_none=True) for m in task.messages], openai_tools(task), False)
        prompt = model.encode([chat])[0]
        options = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64,
                   "pad_token_id": model.tokenizer.pad_token_id, "use_cache": True}
        model.store = PrefixStore()  # a GRPO step's optimizer update empties the store: each step starts cold
        t0 = time.perf_counter()
        if reuse:
            out = model.generate_ids([prompt] * 8, seed=i, temperature=1.0, top_p=1.0, max_new_tokens=64)
            tokens += sum(len(c) for c in out)
        else:
            with model.lock, model.torch.no_grad():
                ids, width = model._generate_plain([prompt] * 8, i, options)
            tokens += int((ids[:, width:] != model.tokenizer.pad_token_id).sum())
        walls.append(time.perf_counter() - t0)
    return {"step_generation_s": round(sum(walls) / len(walls), 2), "steps": len(walls), "completion_tokens": tokens}


class TeacherForced:
    """The model generates every step (timed); the episode then takes the reference call for that step."""

    def __init__(self, model: HFChatModel, task: Task) -> None:
        self.model, self.task, self.step, self.gen_s = model, task, 0, 0.0

    def __call__(self, messages: list[dict], tools: list[dict]) -> PolicyReply:
        t0 = time.perf_counter()
        self.model.generate([as_text_chat(messages, tools, True)], seed=self.step, temperature=0.0, max_new_tokens=64)
        self.gen_s += time.perf_counter() - t0
        calls = self.task.reference.calls
        call = calls[self.step % len(calls)]
        self.step += 1
        return PolicyReply(json.dumps({"tool": call.tool, "args": call.args}))


def bench_agent(model: HFChatModel, tasks: list[Task]) -> dict:
    times = []
    model.store = PrefixStore()
    for task in tasks:
        policy = TeacherForced(model, task)
        episode = run_episode(policy, LocalEnv(), task, max_steps=5)
        assert episode.steps == 5
        times.append(policy.gen_s)
    return {"episode_generation_s": round(sum(times) / len(times), 2), "episodes": len(times), "steps": 5}


def main() -> None:
    tool_ds, work_ds = sys.argv[1], sys.argv[2]
    n, t, s, e = (int(a) for a in (sys.argv[3:7] + ["48", "128", "4", "3"][len(sys.argv[3:7]):]))
    tasks, work = heldout(tool_ds, n), heldout(work_ds, e)
    results: dict = {}
    for label, reuse in (("old", False), ("new", True)):
        model = HFChatModel(None, prefix_cache=reuse)  # a fresh model (and empty prefix store) per path
        model.generate([[{"role": "user", "content": "hi"}]], 0, 0.0, 1.0, 4)  # warm-up
        ev, texts = bench_eval(model, tasks, t)
        prompt_only, _ = bench_eval(model, tasks, 1)  # the prefill alone: one new token per rollout
        results[label] = {"eval": ev, "eval_prompt_only": prompt_only, "grpo": bench_grpo(model, tasks[:s], reuse),
                          "agent": bench_agent(model, work), "texts": texts}
    same = results["old"].pop("texts") == results["new"].pop("texts")
    speedup = {"eval_rollouts_per_s": round(results["new"]["eval"]["rollouts_per_s"]
                                            / results["old"]["eval"]["rollouts_per_s"], 2),
               "eval_prompt_only_rollouts_per_s": round(results["new"]["eval_prompt_only"]["rollouts_per_s"]
                                                        / results["old"]["eval_prompt_only"]["rollouts_per_s"], 2),
               "grpo_step_generation": round(results["old"]["grpo"]["step_generation_s"]
                                             / results["new"]["grpo"]["step_generation_s"], 2),
               "agent_episode_generation": round(results["old"]["agent"]["episode_generation_s"]
                                                 / results["new"]["agent"]["episode_generation_s"], 2)}
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    record = {"machine": machine,
              "command": f"python bench/scripts/rollout_speed.py {tool_ds} {work_ds} {n} {t} {s} {e}",
              "model": "embedded SmolLM2-135M-Instruct (fp32)", "eval_texts_identical": same, "speedup": speedup,
              "results": results}
    print(json.dumps(record, indent=2))
    out = Path(__file__).resolve().parents[1] / "results" / "data" / "rollout_speed.json"
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
