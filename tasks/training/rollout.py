"""GRPO rollouts through the project's generation path, as TRL's ``rollout_func``.

Why not TRL's own transformers path: it left-pads the G copies of each prompt and prefills every copy (G times the
prompt's compute); its generation config cannot share a prefix, and its vLLM
modes need a vLLM that runs beside the trainer (on this CPU vLLM is slower than transformers, see README).

Contract: ``make_rollout(tokenizer, seed, prefix_cache)`` returns ``rollout(prompts, trainer)``: the prompts are
TRL's per-process slice (each prompt already repeated G times by TRL's sampler); each is rendered with the chat
template exactly as evaluation renders it (``HFChatModel.encode``), the G copies of one prompt share one prefill
(``prefix_cache.prepare``), and every completion stops at its end-of-sequence token, which it keeps so the policy
learns to stop. Sampling uses the trainer's temperature, top-p and max completion length under the seed
H(seed, global step, call), so a resumed run samples what the uninterrupted one did. Returns TRL's
``{"prompt_ids", "completion_ids", "logprobs": None}`` (None: TRL computes the log-probs in its forward pass).

``Rollouts`` is what every rollout function shares: the trained model wrapped once per model object, the seed of
each call and the seconds spent in rollouts per step (``take()``: ``rollout_s`` for the training log, so a step's
time splits into rollout and update).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.protocol import batch_seed


class Rollouts:
    def __init__(self, tokenizer: Any, seed: int, prefix_cache: bool) -> None:
        self.tokenizer, self.seed, self.prefix_cache = tokenizer, seed, prefix_cache
        self.calls: dict[int, int] = {}
        self.wrapped: dict[int, Any] = {}
        self.seconds = 0.0

    def start(self, trainer: Any) -> tuple[Any, int, list[int]]:
        """The policy to sample from, the global step and this call's seed path [seed, step, call]."""
        from flywheel.tasks.inference.hf import HFChatModel

        model = trainer.accelerator.unwrap_model(trainer.model)
        if id(model) not in self.wrapped:  # one wrapper (and prefix store) per model object
            self.wrapped.clear()
            self.wrapped[id(model)] = HFChatModel.wrap(model, self.tokenizer, Path("training"),
                                                       prefix_cache=self.prefix_cache)
        step = trainer.state.global_step
        self.calls[step] = self.calls.get(step, -1) + 1
        return self.wrapped[id(model)], step, [self.seed, step, self.calls[step]]

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


def make_rollout(tokenizer: Any, seed: int, prefix_cache: bool = True) -> tuple[Callable[..., Any], Rollouts]:
    state = Rollouts(tokenizer, seed, prefix_cache)

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        policy, _, path = state.start(trainer)
        prompt_ids = policy.encode(prompts)
        completion_ids = policy.generate_ids(prompt_ids, batch_seed(path), trainer.temperature, trainer.top_p,
                                             trainer.max_completion_length)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return state.timed(rollout), state
