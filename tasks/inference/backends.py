"""The policy backends behind one interface (contract: protocol.py): transformers in process (here), vLLM
(vllm_backend.py) and any OpenAI-compatible server (openai_backend.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from flywheel.tasks.inference.openai_backend import (
    KEY_BASE_URLS,
    OPENAI_BASE_URL,
    OpenAIBackend,
    check_key_destination,
)
from flywheel.tasks.inference.protocol import Generation, Request, Sampling, as_text_chat, batch_seed
from flywheel.tasks.inference.vllm_backend import VLLMBackend, cpu_kv_bytes, memory_fraction, ngram_tokens

__all__ = ["KEY_BASE_URLS", "OPENAI_BASE_URL", "OpenAIBackend", "TransformersBackend", "VLLMBackend",
           "check_key_destination", "cpu_kv_bytes", "memory_fraction", "ngram_tokens"]


class TransformersBackend:
    """Batched sampling with a local Hugging Face checkpoint (the embedded model by default); shared prompt
    prefixes are prefilled once unless ``prefix_cache`` is off (tasks/inference/prefix_cache.py)."""

    name = "transformers"

    def __init__(self, model_ref: str | None, batch_size: int = 8, loaded: Any = None,
                 prefix_cache: bool = True) -> None:
        from flywheel.tasks.inference.hf import HFChatModel

        # loaded: an HFChatModel already in memory (training)
        self.model = loaded or HFChatModel(model_ref, prefix_cache=prefix_cache)
        self.model_id, self.batch_size = str(self.model.path), batch_size

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(requests), self.batch_size):
            batch = requests[start:start + self.batch_size]
            t0 = time.perf_counter()
            replies = self.model.generate([as_text_chat(r.messages, r.tools, r.agent) for r in batch],
                                          batch_seed([r.seed for r in batch]), sampling.temperature, sampling.top_p,
                                          sampling.max_tokens, [r.label for r in batch])
            wait = time.perf_counter() - t0
            out += [Generation(x.text, None, r.seed, wait, x.prompt_tokens, x.completion_tokens,
                               "length" if x.completion_tokens >= sampling.max_tokens else "stop")
                    for r, x in zip(batch, replies)]
        return out
