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
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.protocol import batch_seed


def make_rollout(tokenizer: Any, seed: int, prefix_cache: bool = True) -> Callable[[list[Any], Any], dict[str, Any]]:
    from flywheel.tasks.inference.hf import HFChatModel

    calls: dict[int, int] = {}
    wrapped: dict[int, HFChatModel] = {}

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        if id(model) not in wrapped:  # one wrapper (and prefix store) per model object
            wrapped.clear()
            wrapped[id(model)] = HFChatModel.wrap(model, tokenizer, Path("training"), prefix_cache=prefix_cache)
        policy = wrapped[id(model)]
        step = trainer.state.global_step
        calls[step] = calls.get(step, -1) + 1
        prompt_ids = policy.encode(prompts)
        completion_ids = policy.generate_ids(prompt_ids, batch_seed([seed, step, calls[step]]), trainer.temperature,
                                             trainer.top_p, trainer.max_completion_length)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout
