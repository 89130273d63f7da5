"""Greedy prompt-lookup decoding of one conversation, started from its stored prefix cache.

Transformers' own prompt lookup (``generate(prompt_lookup_num_tokens=K)``) cannot start from a cache: its first
pass reads the whole prompt. An agent served one turn at a time needs both, the previous turn's cache and drafts,
so this loop does what assisted decoding does, from the store:

- the conversation but its last token comes from ``prefix_cache.prepare`` (the previous turn's cache extended);
- each pass feeds the tokens not yet cached plus a draft of up to K tokens that transformers'
  ``PromptLookupCandidateGenerator`` copies from the context, keeps the draft's longest prefix that greedy decoding
  would have chosen plus the model's next token, and crops the cache to what was kept;
- it ends as ``generate`` would: at an end-of-sequence token, at ``max_new_tokens``, or at the token that completes
  a stop string (transformers' ``StopStringCriteria``, fed token by token).

Only plain greedy decoding qualifies (``plain_greedy``): a checkpoint whose generation config changes greedy
choices (repetition penalty, banned words, a minimum length, ...) or whose cache slides takes transformers' own path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flywheel.tasks.inference.prefix_cache import PrefixStore, prepare

# GenerationConfig fields that change which token greedy decoding picks, with the value that leaves it alone
GREEDY_NEUTRAL = {"repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
                  "bad_words_ids": None, "min_length": 0, "min_new_tokens": None, "suppress_tokens": None,
                  "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
                  "sequence_bias": None, "exponential_decay_length_penalty": None, "renormalize_logits": False,
                  "forced_decoder_ids": None, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "guidance_scale": None,
                  "watermarking_config": None, "low_memory": None}


def plain_greedy(model: Any) -> bool:
    """Whether greedy decoding of ``model`` is a plain argmax over a cache that crops exactly (no sliding window)."""
    config = model.generation_config
    neutral = all(getattr(config, k, v) in (v, None) for k, v in GREEDY_NEUTRAL.items())
    return neutral and not getattr(model.config, "sliding_window", None)


def lookup_decode(model: Any, store: PrefixStore, ids: Sequence[int], draft_tokens: int, max_new_tokens: int,
                  eos: set[int], pad_id: int, stop: Any = None) -> list[int]:
    """The greedy reply to ``ids``: its new tokens, up to and including an end-of-sequence token or the token that
    completes a stop string (``stop``: a ``StopStringCriteria``). The whole sequence's cache is stored for the
    next turn."""
    import torch
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    past = prepare(model, store, [ids], pad_id).past  # every token of ids but the last
    seq = torch.tensor([list(ids)], device=model.device)
    limit = len(ids) + max_new_tokens
    drafts = PromptLookupCandidateGenerator(num_output_tokens=draft_tokens, max_length=limit)
    pending = 1  # tokens at the end of seq that are not in the cache yet
    while seq.shape[1] < limit:
        candidates, _ = drafts.get_candidates(seq)
        draft = candidates[:, seq.shape[1]:]
        start = seq.shape[1] - pending
        feed = torch.cat([seq[:, start:], draft], dim=1)
        out = model(input_ids=feed, past_key_values=past, use_cache=True,
                    position_ids=torch.arange(start, start + feed.shape[1], device=model.device)[None])
        chosen = out.logits[0, pending - 1:].argmax(-1)  # greedy's token after each fed token from the last one on
        agree = int((chosen[:-1] == draft[0]).long().cumprod(0).sum()) if draft.shape[1] else 0
        new = chosen[:agree + 1][None]
        past.crop(seq.shape[1] + agree - past.get_seq_length())  # drop rejected drafts: the model's own next
        # token is not cached either (crop(-n) drops n tokens; 0 drops none)
        seq, pending = torch.cat([seq, new[:, :limit - seq.shape[1]]], dim=1), 1
        if _ended(seq, len(ids), eos, stop):
            break
    reply = _cut(seq[0, len(ids):].tolist(), seq, len(ids), eos, stop)
    kept = past.get_seq_length()
    store.put(seq[0, :kept].tolist(), [(layer.keys, layer.values) for layer in past.layers])
    return reply


def _ended(seq: Any, start: int, eos: set[int], stop: Any) -> bool:
    return any(x in eos for x in seq[0, start:].tolist()) or bool(stop and any(_stops_at(seq, stop, start)))


def _stops_at(seq: Any, stop: Any, start: int) -> list[bool]:
    """For each new token, whether the sequence up to it ends a stop string (the criteria's own test)."""
    return [bool(stop(seq[:, :end], None)[0]) for end in range(start + 1, seq.shape[1] + 1)]


def _cut(new: list[int], seq: Any, start: int, eos: set[int], stop: Any) -> list[int]:
    """The reply up to its first end: an end-of-sequence token or the token completing a stop string."""
    ends = [i + 1 for i, x in enumerate(new) if x in eos]
    if stop:
        ends += [i + 1 for i, hit in enumerate(_stops_at(seq, stop, start)) if hit]
    return new[:min(ends)] if ends else new
