"""Bench: issue 15's third workload, a lone workplace agent episode of 5 steps, on the transformers backend: the old
path (``--no-prefix-cache``: every step's prompt prefilled whole) against the new one (the episode's KV cache kept
from step to step), against transformers' own prompt lookup decoding (``old+lookupK``: ``generate(
prompt_lookup_num_tokens=K)``, which cannot start from a cache) and against prompt lookup from the kept cache
(``new+lookupK``: ``tasks/inference/lookup.py``, what ``flywheel serve --prompt-lookup K`` runs). As
``rollout_speed.py`` and ``agent_episode_vllm.py``: each step the model generates its reply (timed, greedy, up to 64
tokens), then the episode takes the task's reference call (teacher-forced, so every episode has 5 steps) and the
real session's observation. The paths take turns episode by episode (one model in memory, a store per path), so
load on the machine falls on all of them alike. Mean seconds of generation per episode over E tasks, and how many
steps' texts differ from the old path's.

Run: .venv/bin/python bench/scripts/agent_episode_lookup.py WORKPLACE_DATASET [E] [K,K...]
(writes bench/results/data/agent_episode_lookup.json)
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rollout_speed import heldout  # noqa: E402

from flywheel.tasks.agents.agent import LocalEnv, PolicyReply, run_episode  # noqa: E402
from flywheel.tasks.inference.hf import HFChatModel  # noqa: E402
from flywheel.tasks.inference.prefix_cache import PrefixStore  # noqa: E402
from flywheel.tasks.inference.protocol import as_text_chat  # noqa: E402


class Recorded:
    """The model generates every step (timed, text kept); the episode then takes the reference call for that step."""

    def __init__(self, model: HFChatModel, task) -> None:
        self.model, self.task, self.step, self.gen_s, self.texts = model, task, 0, 0.0, []

    def __call__(self, messages: list[dict], tools: list[dict]) -> PolicyReply:
        t0 = time.perf_counter()
        reply = self.model.generate([as_text_chat(messages, tools, True)], seed=self.step, temperature=0.0,
                                    max_new_tokens=64)[0]
        self.gen_s += time.perf_counter() - t0
        self.texts.append(reply.text)
        call = self.task.reference.calls[self.step % len(self.task.reference.calls)]
        self.step += 1
        return PolicyReply(json.dumps({"tool": call.tool, "args": call.args}))


def episode(model: HFChatModel, task) -> tuple[float, list[str]]:
    policy = Recorded(model, task)
    assert run_episode(policy, LocalEnv(), task, max_steps=5).steps == 5
    return policy.gen_s, policy.texts


def main() -> None:
    dataset = sys.argv[1]
    e = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    drafts = [int(k) for k in sys.argv[3].split(",")] if len(sys.argv) > 3 else [4]
    tasks = heldout(dataset, e)
    paths = [("old", False, 0), ("new", True, 0)] + [(f"{'new' if reuse else 'old'}+lookup{k}", reuse, k)
                                                     for k in drafts for reuse in (False, True)]
    model = HFChatModel(None)
    model.generate([[{"role": "user", "content": "hi"}]], 0, 0.0, 1.0, 4)  # warm-up
    stores = {label: PrefixStore() for label, _, _ in paths}  # every path starts cold
    times: dict[str, list[float]] = {label: [] for label, _, _ in paths}
    texts: dict[str, list[list[str]]] = {label: [] for label, _, _ in paths}
    for task in tasks:
        for label, reuse, k in paths:
            model.prefix_cache, model.lookup, model.store = reuse, k, stores[label]
            seconds, steps = episode(model, task)
            times[label].append(seconds)
            texts[label].append(steps)
            print(label, task.id, round(seconds, 2), flush=True)
    results = {}
    for label, _, _ in paths:
        differ = sum(a != b for x, y in zip(texts[label], texts["old"]) for a, b in zip(x, y))
        results[label] = {"episode_generation_s": round(sum(times[label]) / len(tasks), 2),
                          "steps_whose_text_differs_from_old": differ, "steps": sum(len(x) for x in texts[label])}
    base = results["old"]["episode_generation_s"]
    for r in results.values():
        r["speedup"] = round(base / r["episode_generation_s"], 2)
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    record = {"machine": machine, "command": " ".join(["python bench/scripts/agent_episode_lookup.py", *sys.argv[1:]]),
              "model": "embedded SmolLM2-135M-Instruct (transformers fp32)", "episodes": e, "steps": 5,
              "results": results}
    print(json.dumps(record, indent=2))
    out = Path(__file__).resolve().parents[1] / "results" / "data" / "agent_episode_lookup.json"
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
