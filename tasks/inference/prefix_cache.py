"""Shared-prefix KV reuse for transformers generation: a prompt's prefix is prefilled once, by whichever request
first needs it, and every later request that starts with the same tokens reuses its keys and values.

``PrefixStore`` holds the KV caches of token sequences for one model identity within a byte budget;
``prepare(model, store, prompts)`` prefills each prompt but its last token from the longest stored prefix and
returns the batch's starting cache and inputs in the same left-padded shapes as without reuse, so decoding costs
the same and greedy texts match the plain batch. Reuse is exact on tokens: only a stored sequence's first n tokens
are reused when they equal the prompt's first n tokens (the longest common prefix), never a near match.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

KV = list[tuple[Any, Any]]  # per layer: keys and values, shape [1, kv_heads, tokens, head_dim]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixStore:
    """KV caches (batch 1, one ``(keys, values)`` pair per layer) of token sequences for one model identity, least
    recently used first out beyond a byte budget (``FLYWHEEL_PREFIX_CACHE_MB``, 1024: the histories of a lockstep batch
    of 16 agent episodes); a sequence that is a prefix of a newer one is dropped. ``check(identity)`` empties it when
    the identity differs (another model, tokenizer, adapter, or weights changed in place by training), so a cache is
    never reused for a model that did not build it."""
    def __init__(self, max_bytes: int = int(os.environ.get("FLYWHEEL_PREFIX_CACHE_MB", "1024")) << 20) -> None:
        self.max_bytes, self.identity = max_bytes, None
        self.entries: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self.hits = self.reused_tokens = self.prefilled_tokens = 0

    def check(self, identity: Hashable) -> None:
        if identity != self.identity:
            self.entries.clear()
            self.identity = identity

    def match(self, ids: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        """The longest stored prefix of ``ids``: its length and the stored sequence holding it."""
        best, key = 0, None
        for stored in self.entries:
            n = common_prefix(stored, ids)
            if n > best:
                best, key = n, stored
        return best, key

    def get(self, key: tuple[int, ...], n: int) -> KV:
        self.entries.move_to_end(key)
        return [(k[:, :, :n], v[:, :, :n]) for k, v in self.entries[key]]

    def put(self, ids: Sequence[int], kv: KV) -> None:
        key = tuple(ids)
        for stored in [s for s in self.entries if len(s) < len(key) and key[:len(s)] == s]:
            del self.entries[stored]  # a prefix of the new sequence: every match it gives, the new one gives too
        self.entries[key] = [(k.detach(), v.detach()) for k, v in kv]
        self.entries.move_to_end(key)
        while len(self.entries) > 1 and self.nbytes() > self.max_bytes:
            self.entries.popitem(last=False)

    def nbytes(self) -> int:
        return sum(k.nelement() * k.element_size() * 2 for kv in self.entries.values() for k, _ in kv)


def _extend(model: Any, store: PrefixStore, ids: Sequence[int]) -> int:
    """Store the KV of ``ids``, prefilling only what the longest stored prefix lacks; returns the tokens reused."""
    import torch
    from transformers import DynamicCache

    n, key = store.match(ids)
    if n == len(ids):
        return n
    past = DynamicCache(ddp_cache_data=store.get(key, n), config=model.config) if key else DynamicCache()
    new = torch.tensor([list(ids[n:])], device=model.device)
    out = model(input_ids=new, past_key_values=past, use_cache=True, logits_to_keep=1,
                position_ids=torch.arange(n, len(ids), device=model.device)[None])
    cache = out.past_key_values
    store.put(ids, [(layer.keys, layer.values) for layer in cache.layers])
    store.prefilled_tokens += len(ids) - n
    return n


@dataclass
class Prepared:
    input_ids: Any  # [batch, cached + rest]: token ids, pads where masked
    attention_mask: Any
    past: Any  # DynamicCache holding the cached part of every row
    cached: list[int]  # tokens of each prompt served from the store


def prepare(model: Any, store: PrefixStore, prompts: Sequence[Sequence[int]], pad_id: int) -> Prepared:
    """Every prompt but its last token comes from the store, prefilled at batch 1 by extending the longest stored
    prefix: what prompts share (with one another, an earlier batch or an agent's previous turn) is computed once.
    The batch is left-padded exactly as without reuse, so decoding runs on the same shapes."""
    import torch
    from transformers import DynamicCache

    for ids in prompts:
        reused = _extend(model, store, ids[:len(ids) - 1])  # the last token is fed by generate, for its logits
        store.reused_tokens += reused
        store.hits += reused > 0
    cached, kvs = [], []
    for ids in prompts:
        n, key = store.match(ids)
        n = min(n, len(ids) - 1)
        cached.append(n if key else 0)
        kvs.append(store.get(key, n) if key and n else None)
    width, rest = max(cached), max(len(p) - c for p, c in zip(prompts, cached))
    rows, masks = [], []
    for ids, c in zip(prompts, cached):
        tail = list(ids[c:])
        rows.append([pad_id] * (width - c) + list(ids[:c]) + [pad_id] * (rest - len(tail)) + tail)
        masks.append([0] * (width - c) + [1] * c + [0] * (rest - len(tail)) + [1] * len(tail))
    past = DynamicCache()
    if width:
        template = next(kv for kv in kvs if kv is not None)
        layers = [(_stack(kvs, cached, width, li, 0, k0), _stack(kvs, cached, width, li, 1, k0))
                  for li, (k0, _) in enumerate(template)]
        past = DynamicCache(ddp_cache_data=layers, config=model.config)
    device = model.device
    return Prepared(torch.tensor(rows, device=device), torch.tensor(masks, device=device), past, cached)


def _stack(kvs: list[KV | None], cached: list[int], width: int, layer: int, which: int, ref: Any) -> Any:
    """One layer's keys (which=0) or values (1) for the batch: each row's cached part, left-padded with zeros."""
    import torch

    rows = []
    for kv, c in zip(kvs, cached):
        zeros = ref.new_zeros((1, ref.shape[1], width - c, ref.shape[3]))
        rows.append(zeros if kv is None else torch.cat([zeros, kv[layer][which]], dim=2))
    return torch.cat(rows)
