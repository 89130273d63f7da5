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
                  "watermarking_config": None, "low_memory": None, "num_beams": 1, "num_beam_groups": 1,
                  "diversity_penalty": 0.0, "penalty_alpha": None, "dola_layers": None, "constraints": None,
                  "force_words_ids": None}


def plain_greedy(model: Any) -> bool:
    """Whether greedy decoding of ``model`` is a plain argmax over a cache that crops exactly (no sliding window)."""
    config = model.generation_config
    neutral = all(getattr(config, k, v) in (v, None) for k, v in GREEDY_NEUTRAL.items())
    return neutral and not getattr(model.config, "sliding_window", None)


def lookup_decode(model: Any, store: PrefixStore, ids: Sequence[int], draft_tokens: int, max_new_tokens: int,
                  eos: set[int], pad_id: int, stop: Any = None) -> list[int]:
    """The greedy reply to ``ids``: its new tokens, up to and including an end-of-sequence token or the token that
    completes a stop string (``stop``: a ``StopStringCriteria``). The sequence's cache is stored for the next
    turn."""
    import torch
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    past = prepare(model, store, [ids], pad_id).past  # every token of ids but the last
    seq = torch.tensor([list(ids)], device=model.device)
    limit = len(ids) + max_new_tokens
    drafts = PromptLookupCandidateGenerator(num_output_tokens=draft_tokens, max_length=limit)
    end = None
    while end is None and seq.shape[1] < limit:
        first = seq.shape[1]
        seq = torch.cat([seq, _step(model, past, seq, drafts, limit)], dim=1)
        end = _first_end(seq, first, eos, stop)
    kept = past.get_seq_length()  # seq but its last token
    store.put(seq[0, :kept].tolist(), [(layer.keys, layer.values) for layer in past.layers])
    return seq[0, len(ids):end].tolist()


def _step(model: Any, past: Any, seq: Any, drafts: Any, limit: int) -> Any:
    """One pass: ``seq``'s last token and a draft (at most up to ``limit``) fed at once; returns the draft's prefix
    that greedy decoding agrees with plus greedy's next token, and crops ``past`` to ``seq`` and that prefix."""
    import torch

    n = seq.shape[1]
    draft = drafts.get_candidates(seq)[0][:, n:limit - 1]  # the model adds one token of its own
    feed = torch.cat([seq[:, -1:], draft], dim=1)
    out = model(input_ids=feed, past_key_values=past, use_cache=True,
                position_ids=torch.arange(n - 1, n - 1 + feed.shape[1], device=model.device)[None])
    chosen = out.logits[0].argmax(-1)  # greedy's token after each fed token
    agree = int((chosen[:-1] == draft[0]).long().cumprod(0).sum()) if draft.shape[1] else 0
    past.crop(n + agree - past.get_seq_length())  # crop(-k) drops the k rejected draft tokens; 0 drops none
    return chosen[None, :agree + 1]


def _first_end(seq: Any, first: int, eos: set[int], stop: Any) -> int | None:
    """The length of ``seq`` up to its first end among the tokens from ``first`` on (an end-of-sequence token, or
    the token that completes a stop string by the criteria's own test), or None. Each token is tested once."""
    for i in range(first, seq.shape[1]):
        if int(seq[0, i]) in eos or (stop is not None and bool(stop(seq[:, :i + 1], None)[0])):
            return i + 1
    return None
