"""Chat generation with a local Hugging Face checkpoint (CPU or CUDA).

Contract: ``generate(conversations, seed)`` samples one reply per conversation
in one left-padded batch after ``torch.manual_seed(seed)``; the same inputs and
seed give the same replies on the same machine. Callers form batches from
their input alone, so results never depend on scheduling.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int


class HFChatModel:
    def __init__(self, model_ref: str | None) -> None:
        from transformers.utils import logging as hf_logging

        from flywheel.tasks.inference.models import load_causal_lm, resolve_model

        hf_logging.disable_progress_bar()  # "Loading weights" bars would break the CLI's progress display
        path = resolve_model(model_ref)
        self._setup(*load_causal_lm(path), path)  # a PEFT adapter folder loads on its base model

    @classmethod
    def wrap(cls, model: Any, tokenizer: Any, path: Path) -> HFChatModel:
        """A model already in memory (e.g. the policy being trained): generation shares its weights."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, path, train_mode=model.training)
        return self

    def _setup(self, model: Any, tokenizer: Any, path: Path, train_mode: bool = False) -> None:
        import torch

        self.path, self.torch, self.tokenizer = path, torch, tokenizer
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = model if train_mode else model.to(self.device).eval()
        self.lock = threading.Lock()  # the global torch seed makes generation a critical section

    def generate(self, conversations: Sequence[Sequence[dict[str, str]]], seed: int, temperature: float = 0.7,
                 top_p: float = 0.9, max_new_tokens: int = 96) -> list[Reply]:
        prompts = [self.tokenizer.apply_chat_template(list(c), tokenize=False, add_generation_prompt=True)
                   for c in conversations]
        self.tokenizer.padding_side = "left"  # decoder-only batches are padded on the left
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True).to(self.model.device)
        sample = temperature > 0
        options = {"do_sample": sample, "max_new_tokens": max_new_tokens, "pad_token_id": self.tokenizer.pad_token_id,
                   "use_cache": True}  # trainers may turn the KV cache off on the model they train
        if sample:
            options |= {"temperature": temperature, "top_p": top_p}
        with self.lock, self.torch.no_grad():
            self.torch.manual_seed(seed)
            ids = self.model.generate(**enc, **options)
        new = ids[:, enc["input_ids"].shape[1]:]
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        done = (new != self.tokenizer.pad_token_id).sum(dim=1).tolist()
        return [Reply(t, int(p), int(c)) for t, p, c in zip(texts, prompt_lens, done, strict=True)]
