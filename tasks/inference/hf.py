"""Chat generation with a local Hugging Face checkpoint (CPU, or CUDA and bf16 when a GPU is present).

Contract: ``generate(conversations, seed)`` samples one reply per conversation in one batch after
``torch.manual_seed(seed)``; the same inputs and seed give the same replies on the same machine. Callers form
batches from their input alone, so results never depend on scheduling.

With ``prefix_cache`` (the default) prompts go through ``prefix_cache.prepare``: a prefix shared by several prompts
is prefilled once and reused, and a single conversation's cache is kept for its next turn (agent episodes);
without it, every prompt is prefilled whole in a left-padded batch (kept for comparison). ``prompt_lookup=K``
(``flywheel serve --prompt-lookup K``; off everywhere else) decodes a lone greedy request with prompt lookup:
drafts of up to K tokens copied from the context, each checked in one forward pass (``lookup.py`` from the stored
cache; transformers' assisted decoding without it, or when the generation config changes greedy choices).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.lookup import lookup_decode, plain_greedy
from flywheel.tasks.inference.protocol import context_error

MAX_LOOKUP = 64


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int


class HFChatModel:
    def __init__(self, model_ref: str | None, prefix_cache: bool = True, prompt_lookup: int = 0) -> None:
        if not 0 <= prompt_lookup <= MAX_LOOKUP:  # before the model loads
            raise ValueError(f"prompt lookup of {prompt_lookup} draft tokens: expected 0 (off) to {MAX_LOOKUP}")
        from transformers.utils import logging as hf_logging

        from flywheel.tasks.inference.models import load_causal_lm, resolve_model

        hf_logging.disable_progress_bar()  # "Loading weights" bars would break the CLI's progress display
        path = resolve_model(model_ref)
        self._setup(*load_causal_lm(path), path, prefix_cache=prefix_cache)  # an adapter folder loads on its base
        self.lookup = prompt_lookup

    @classmethod
    def wrap(cls, model: Any, tokenizer: Any, path: Path, prefix_cache: bool = True) -> HFChatModel:
        """A model already in memory (e.g. the policy being trained): generation shares its weights."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, path, train_mode=model.training, prefix_cache=prefix_cache)
        return self

    def _setup(self, model: Any, tokenizer: Any, path: Path, train_mode: bool = False,
               prefix_cache: bool = True) -> None:
        import torch

        from flywheel.tasks.inference.prefix_cache import PrefixStore

        self.path, self.torch, self.tokenizer = path, torch, tokenizer
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if not train_mode and self.device == "cuda" and torch.cuda.is_bf16_supported():
            model = model.to(torch.bfloat16)  # inference only: a model being trained keeps the trainer's dtype
        self.model = model if train_mode else model.to(self.device).eval()
        self.prefix_cache, self.store, self.lookup = prefix_cache, PrefixStore(), 0
        self.lock = threading.Lock()  # the global torch seed makes generation a critical section

    def identity(self) -> tuple[Any, ...]:
        """What a stored prefix cache was built with: this model object and tokenizer, the active adapters, and
        the weights' in-place version counters (an optimizer step bumps them, so a cache from before is stale)."""
        version = sum(p._version for p in self.model.parameters() if p.requires_grad)
        adapters = getattr(self.model, "active_adapters", None)
        return (id(self.model), id(self.tokenizer), len(self.tokenizer), str(self.model.dtype), str(self.model.device),
                tuple(adapters) if isinstance(adapters, list | tuple) else adapters, version)

    def encode(self, conversations: Sequence[Sequence[dict[str, str]]]) -> list[list[int]]:
        texts = [self.tokenizer.apply_chat_template(list(c), tokenize=False, add_generation_prompt=True)
                 for c in conversations]
        return [list(ids) for ids in self.tokenizer(texts)["input_ids"]]

    def check_context(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, labels: Sequence[str]) -> None:
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for i, ids in enumerate(prompts):
            if limit and len(ids) + max_new_tokens > limit:
                name = labels[i] if i < len(labels) and labels[i] else f"request {i}"
                raise ValueError(context_error(name, len(ids), max_new_tokens, limit, self.path.name))

    def generate(self, conversations: Sequence[Sequence[dict[str, str]]], seed: int, temperature: float = 0.7,
                 top_p: float = 0.9, max_new_tokens: int = 96, labels: Sequence[str] = (),
                 stop: Sequence[str] = ()) -> list[Reply]:
        """One reply per conversation; each ends at EOS, after ``max_new_tokens`` or once its text holds one of
        ``stop`` (included: the caller cuts it)."""
        prompts = self.encode(conversations)
        new = self.generate_ids(prompts, seed, temperature, top_p, max_new_tokens, labels, stop)
        eos = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return [Reply(t, len(p), sum(1 for x in n if x not in eos))
                for t, p, n in zip(texts, prompts, new, strict=True)]

    def generate_ids(self, prompts: Sequence[Sequence[int]], seed: int, temperature: float = 0.7, top_p: float = 0.9,
                     max_new_tokens: int = 96, labels: Sequence[str] = (),
                     stop: Sequence[str] = ()) -> list[list[int]]:
        """The new tokens of each prompt, up to and including the first end-of-sequence token (or the token that
        completes a ``stop`` string)."""
        self.check_context(prompts, max_new_tokens, labels)
        sample = temperature > 0
        options = {"do_sample": sample, "max_new_tokens": max_new_tokens, "pad_token_id": self.tokenizer.pad_token_id,
                   "use_cache": True}  # trainers may turn the KV cache off on the model they train
        if stop:  # transformers' StopStringCriteria: a finished row pads while the others go on
            options |= {"stop_strings": list(stop), "tokenizer": self.tokenizer}
        if sample:
            options |= {"temperature": temperature, "top_p": top_p}
        lookup = not sample and self.lookup > 0 and len(prompts) == 1  # prompt lookup drafts a lone greedy request
        stops = {self.tokenizer.eos_token_id, *self._eos_ids()}
        if lookup and self.prefix_cache and plain_greedy(self.model):
            from transformers import StopStringCriteria

            with self.lock, self.torch.no_grad():
                self.store.check(self.identity())
                criteria = StopStringCriteria(self.tokenizer, list(stop)) if stop else None
                return [lookup_decode(self.model, self.store, prompts[0], self.lookup, max_new_tokens, stops,
                                      self.tokenizer.pad_token_id, criteria)]
        if lookup:  # transformers' assisted decoding: its first pass reads the whole prompt, never a stored cache
            options["prompt_lookup_num_tokens"] = self.lookup
        with self.lock, self.torch.no_grad():
            if self.prefix_cache and not lookup:
                ids, width = self._generate_reusing(prompts, seed, options)
            else:
                ids, width = self._generate_plain(prompts, seed, options)
        out = []
        for row in ids[:, width:].tolist():
            end = next((i + 1 for i, x in enumerate(row) if x in stops), len(row))
            out.append(row[:end])
        return out

    def _eos_ids(self) -> list[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        return [eos] if isinstance(eos, int) else list(eos or [])

    def _generate_plain(self, prompts: Sequence[Sequence[int]], seed: int, options: dict[str, Any]) -> tuple[Any, int]:
        self.tokenizer.padding_side = "left"  # decoder-only batches are padded on the left
        enc = self.tokenizer.pad({"input_ids": [list(p) for p in prompts]}, return_tensors="pt").to(self.model.device)
        self.torch.manual_seed(seed)
        return self.model.generate(**enc, **options), enc["input_ids"].shape[1]

    def _generate_reusing(self, prompts: Sequence[Sequence[int]], seed: int,
                          options: dict[str, Any]) -> tuple[Any, int]:
        from flywheel.tasks.inference.prefix_cache import prepare

        self.store.check(self.identity())
        prep = prepare(self.model, self.store, prompts, self.tokenizer.pad_token_id)
        single = len(prompts) == 1
        self.torch.manual_seed(seed)
        out = self.model.generate(input_ids=prep.input_ids, attention_mask=prep.attention_mask,
                                  past_key_values=prep.past, return_dict_in_generate=True, **options)
        if single:  # an agent's next turn starts with this whole conversation: keep its cache
            cache = out.past_key_values
            kept = cache.get_seq_length()
            self.store.put(out.sequences[0, :kept].tolist(), [(layer.keys, layer.values) for layer in cache.layers])
        return out.sequences, prep.input_ids.shape[1]
