"""GRPO rollouts through the project's generation path, as TRL's ``rollout_func``, with online difficulty filtering.

Why not TRL's own transformers path: it left-pads the G copies of each prompt and prefills every copy (G times the
prompt's compute); its generation config cannot share a prefix, and its vLLM modes need a vLLM that runs beside
the trainer. TRL has no online filtering either: a group whose G rewards are all equal has zero advantage and
teaches nothing, yet TRL trains on it. ``make_rollout`` builds the rollout function, ``Refill`` does the filtering
and ``Rollouts`` holds what every rollout function shares. Each sample's "reward" is the one GRPO trains on
(``rewards.train_reward``, ``TrainConfig.reward``), so online filtering calls a group flat when its training
rewards are.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flywheel.schemas import Task
from flywheel.tasks.inference.protocol import batch_seed
from flywheel.tasks.training.rewards import RewardKind, train_reward

Group = tuple[Task, list[dict[str, Any]]]  # a task and its G samples (each with a "reward")



def prompt(task: Task) -> list[dict[str, str]]:
    """A single-turn task's prompt as evaluation renders it (tools in the system turn): SFT, GRPO and the rollouts."""
    from flywheel.tasks.agents.agent import openai_tools
    from flywheel.tasks.inference.policy import as_text_chat

    return as_text_chat([m.model_dump(exclude_none=True) for m in task.messages], openai_tools(task), agent=False)


class Rollouts:
    """What every rollout function shares: the trained model wrapped once per model object, the seed path of each call
    and the seconds spent in rollouts per step (``take()``: ``rollout_s``, so a step's time splits into rollout and
    update); with rollouts on vLLM, ``check_engine(model, step)`` lends the synced engine to the periodic checks (an
    eval's cost on vLLM instead of a transformers pass over the slice)."""
    def __init__(self, tokenizer: Any, seed: int, prefix_cache: bool, vllm_base: Path | None = None) -> None:
        self.tokenizer, self.seed, self.prefix_cache, self.vllm_base = tokenizer, seed, prefix_cache, vllm_base
        self.calls: dict[int, int] = {}
        self.wrapped: dict[int, Any] = {}
        self.seconds = 0.0

    def start(self, trainer: Any) -> tuple[Any, int, list[int]]:
        """The policy to sample from, the global step and this call's seed path [seed, step, call]."""
        policy = self._policy(trainer.accelerator.unwrap_model(trainer.model))
        step = trainer.state.global_step
        self.calls[step] = self.calls.get(step, -1) + 1
        if self.vllm_base is not None:
            policy.sync(step)  # the weights of this step's policy, once per optimizer step
        return policy, step, [self.seed, step, self.calls[step]]

    def _policy(self, model: Any) -> Any:
        from flywheel.tasks.inference.hf import HFChatModel

        if id(model) not in self.wrapped:  # one wrapper (and prefix store) per model object
            self.close()
            policy = HFChatModel.wrap(model, self.tokenizer, Path("training"), prefix_cache=self.prefix_cache)
            if self.vllm_base is not None:  # the same encoding; the sampling on vLLM (vllm_rollout.py)
                from flywheel.tasks.training.vllm_rollout import VLLMPolicy

                policy = VLLMPolicy(policy, model, self.vllm_base)
            self.wrapped[id(model)] = policy
        return self.wrapped[id(model)]

    def check_engine(self, model: Any, step: int) -> Any:
        """For the periodic checks: the vLLM engine serving ``model``'s weights at ``step`` (None when rollouts are
        not on vLLM). The next rollout syncs again, so it starts from an empty prefix cache, as a resumed run does."""
        if self.vllm_base is None:
            return None
        policy = self._policy(model)
        policy.sync(step)
        policy.synced = None
        return policy.engine

    def close(self) -> None:
        """Stop a vLLM engine (it holds its KV cache's memory until then)."""
        for policy in self.wrapped.values():
            if hasattr(policy, "close"):
                policy.close()
        self.wrapped.clear()

    def timed(self, fn: Callable[[list[Any], Any], dict[str, Any]]) -> Callable[[list[Any], Any], dict[str, Any]]:
        def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
            t0 = time.perf_counter()
            try:
                return fn(prompts, trainer)
            finally:
                self.seconds += time.perf_counter() - t0
        return rollout

    def take(self) -> dict[str, float]:
        seconds, self.seconds = self.seconds, 0.0
        return {"rollout_s": round(seconds, 3)}


def has_signal(rewards: Sequence[float | None]) -> bool:
    valid = [r for r in rewards if r is not None]
    return len(valid) >= 2 and len(set(valid)) > 1


class Refill:
    """Online difficulty filtering: after a round, each group whose valid rewards are all equal (or fewer than two
    valid) is dropped and replaced by the group of a fresh train task, drawn under a seed of (seed, step, call, group,
    redraw), up to ``refill`` times per group; a group still flat after that is kept (TRL gives it zero advantage).
    ``take()`` gives per step ``groups``, ``groups_dropped`` (replaced) and ``groups_flat`` (kept flat)."""
    def __init__(self, pool: list[Task], refill: int) -> None:
        self.pool, self.refill = sorted(pool, key=lambda t: t.id), refill
        self.groups = self.dropped = self.flat = 0

    def run(self, tasks: list[Task], path: list[int],
            generate: Callable[[list[Task], int], list[list[dict[str, Any]]]]) -> list[Group]:
        """``generate(tasks, seed)`` -> the G samples of each task; groups without signal are redrawn."""
        groups = list(zip(tasks, generate(tasks, batch_seed([*path, 0]))))
        for redraw in range(1, self.refill + 1):
            flat = [g for g, (_, samples) in enumerate(groups) if not has_signal([s["reward"] for s in samples])]
            if not flat:
                break
            self.dropped += len(flat)
            fresh = [random.Random(batch_seed([*path, g, redraw])).choice(self.pool) for g in flat]
            for g, group in zip(flat, zip(fresh, generate(fresh, batch_seed([*path, redraw])))):
                groups[g] = group
        self.groups += len(groups)
        self.flat += sum(not has_signal([s["reward"] for s in samples]) for _, samples in groups)
        return groups

    def take(self) -> dict[str, int]:
        out = {"groups": self.groups, "groups_dropped": self.dropped, "groups_flat": self.flat} if self.groups else {}
        self.groups = self.dropped = self.flat = 0
        return out


def distinct(prompts: list[Any], by_prompt: dict[str, Task]) -> tuple[list[Task], int]:
    """The task of each group of TRL's prompts (G copies in a row) and G."""
    keys = [json.dumps(p) for p in prompts]
    size = next((i for i, k in enumerate(keys) if k != keys[0]), len(keys))
    return [by_prompt[k] for k in keys[::size]], size


def make_rollout(tokenizer: Any, tasks: list[Task], seed: int, prefix_cache: bool = True, refill: int = 0,
                 reward: RewardKind = "verifier", threshold: float = 1.0,
                 vllm_base: Path | None = None) -> tuple[Callable[..., Any], Rollouts, Refill]:
    """``(rollout, state, refill)``. ``rollout(prompts, trainer)`` gets TRL's per-process slice (each prompt repeated G
    times in a row by TRL's sampler); each prompt is rendered with the chat template exactly as evaluation renders it
    (``HFChatModel.encode``), the G copies of one prompt share one prefill (``prefix_cache.prepare``), and every
    completion stops at its end-of-sequence token, which it keeps so the policy learns to stop. Sampling uses the
    trainer's temperature, top-p and max completion length under seeds derived from (seed, global step, call, redraw),
    so a resumed run samples what the uninterrupted one did. Returns TRL's ``{"prompt_ids", "completion_ids",
    "logprobs": None}`` (None: TRL computes the log-probs in its forward pass) plus ``task`` and ``verdict`` per
    completion, which the reward function reads."""
    from flywheel.verifiers.envs import get_env

    by_prompt = {json.dumps(prompt(t)): t for t in tasks}
    state, filtering = Rollouts(tokenizer, seed, prefix_cache, vllm_base), Refill(tasks, refill)

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        policy, _, path = state.start(trainer)
        first, g = distinct(prompts, by_prompt)

        def generate(group_tasks: list[Task], round_seed: int) -> list[list[dict[str, Any]]]:
            prompt_ids = policy.encode([prompt(t) for t in group_tasks for _ in range(g)])
            ids = policy.generate_ids(prompt_ids, round_seed, trainer.temperature, trainer.top_p,
                                      trainer.max_completion_length)
            out = []
            for k, task in enumerate(group_tasks):
                samples = []
                for p, c in zip(prompt_ids[k * g:(k + 1) * g], ids[k * g:(k + 1) * g]):
                    verdict = get_env(task.env).verify(task, tokenizer.decode(c, skip_special_tokens=True))
                    samples.append({"prompt_ids": p, "completion_ids": c, "verdict": verdict,
                                    "reward": train_reward(verdict, reward, threshold)})
                out.append(samples)
            return out

        groups = filtering.run(first, path, generate)
        samples = [(t, s) for t, group in groups for s in group]
        return {"prompt_ids": [s["prompt_ids"] for _, s in samples],
                "completion_ids": [s["completion_ids"] for _, s in samples], "logprobs": None,
                "task": [t.model_dump_json() for t, _ in samples], "verdict": [s["verdict"] for _, s in samples]}

    return state.timed(rollout), state, filtering
