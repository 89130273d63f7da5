"""Shared-prefix training passes: the tokens several rows of a batch start with go through the model once, with
gradients, and those rows continue from that one KV cache.

Why: on CPU a GRPO update is a forward and a backward over every row's prompt and completion, and the prompt is most
of a row (a system turn with one domain's tool catalog, then one request). The G completions of one prompt repeat
all of it, and the replay's reference answers of one domain repeat its catalog. Attention is causal, so a prefix's
keys and values do not depend on what follows it: computing them once and expanding them over the rows gives the
same outputs, and autograd sums the rows' gradients through the expansion into the one pass that made them.

Exactness: rows are laid out again without their left padding (``[shared prefix][rest][right padding]``). Rotary
position embeddings see only position differences, so log-probs, entropies, losses and gradients are those of the
padded batch up to float rounding (tests/tasks/training/test_shared_prefix.py); a model without rotary embeddings,
a multimodal batch, rows whose mask has a hole, or a batch with no prefix of ``MIN_SHARED`` tokens that two rows
share keeps TRL's pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flywheel.tasks.inference.prefix_cache import common_prefix

MIN_SHARED = 16  # tokens: a shorter shared prefix is not worth its own pass
OVERHEAD = 32  # tokens' worth of work one more pass costs (a batch-1 prefix pass and a smaller batch)
MULTIMODAL = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "num_tiles", "image_sizes",
              "token_type_ids", "mm_token_type_ids", "image_position_ids")


@dataclass(frozen=True)
class Part:
    rows: list[int]  # the batch rows in this part, in its order
    shared: int  # prefix tokens they all start with (0: a plain pass)
    prefix: Any  # [shared] those tokens
    ids: Any  # [n, W] each row's tokens after the prefix, right-padded
    mask: Any  # [n, shared + W]
    labels: Any  # [n, W] the labels of those tokens, -100 on padding
    starts: Any  # [n] each row's first labelled token, counted in the suffix


def rotary(model: Any) -> bool:
    """Positions enter attention only as differences (rotary embeddings), so moving a row leaves it unchanged."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = inner.config.get_text_config()
    return bool(getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None))


def plan(rows: list[list[int]], limits: list[int]) -> list[tuple[list[int], int]] | None:
    """The batch's rows (real tokens) in groups, each with the prefix its rows share (capped at each row's limit: one
    short of its first labelled token, so every scored position is outside it); the grouping minimises the tokens
    computed, padding included, plus ``OVERHEAD`` per pass, over groups of rows adjacent in token order; None when no
    group shares ``MIN_SHARED`` tokens."""
    order = sorted(range(len(rows)), key=lambda b: rows[b])  # rows sharing a prefix are adjacent
    size, cap = [len(rows[b]) for b in order], [limits[b] for b in order]
    near = [common_prefix(rows[a], rows[b]) for a, b in zip(order, order[1:])]
    best = [(0, 0, 0)]  # best[j]: the least cost of order[:j], where its last group starts, that group's prefix
    for j in range(1, len(rows) + 1):
        options, common, longest = [], cap[j - 1], size[j - 1]
        for i in range(j - 1, -1, -1):  # the group order[i:j]: its prefix, longest row and cost in tokens
            if i < j - 1:
                common = min(common, near[i], cap[i])
            longest = max(longest, size[i])
            shared = common if i < j - 1 and common >= MIN_SHARED else 0
            options.append((best[i][0] + OVERHEAD + shared + (j - i) * (longest - shared), i, shared))
        best.append(min(options))
    groups, j = [], len(rows)
    while j:
        _, i, shared = best[j]
        groups.append(([order[k] for k in range(i, j)], shared))
        j = i
    groups.reverse()
    return groups if any(shared for _, shared in groups) else None


def parts(ids: Any, mask: Any, labels: Any, pad: int) -> list[Part] | None:
    """The groups as ``Part``: rows, shared length, the suffix ids, labels and attention mask (prefix included), each
    row's first labelled token counted in the suffix; None to fall back. Rows whose real tokens (mask 1) are one run
    each, as padding on either side leaves them; else None."""
    import torch

    real = mask.bool()
    count = real.sum(1)
    span = ids.size(1) - real.long().argmax(1) - real.flip(1).long().argmax(1)
    if ids.size(0) < 2 or bool((count == 0).any()) or bool((span != count).any()):
        return None
    rows = [ids[b][real[b]] for b in range(ids.size(0))]
    marks = [labels[b][real[b]] for b in range(ids.size(0))]
    firsts = [int(torch.where(m != -100, torch.arange(len(m), device=m.device), len(m)).min()) for m in marks]
    groups = plan([r.tolist() for r in rows], [f - 1 for f in firsts])
    if groups is None:
        return None
    out = []
    for members, shared in groups:
        widest = max(len(rows[b]) for b in members) - shared
        part_ids = torch.full((len(members), widest), pad, dtype=ids.dtype, device=ids.device)
        part_labels = torch.full((len(members), widest), -100, dtype=labels.dtype, device=ids.device)
        att = torch.zeros((len(members), shared + widest), dtype=mask.dtype, device=mask.device)
        att[:, :shared] = 1
        for k, b in enumerate(members):
            part_ids[k, :len(rows[b]) - shared] = rows[b][shared:]
            part_labels[k, :len(rows[b]) - shared] = marks[b][shared:]
            att[k, shared:len(rows[b])] = 1
        out.append(Part(members, shared, rows[members[0]][:shared], part_ids, att, part_labels,
                        torch.tensor([firsts[b] - shared for b in members], device=ids.device)))
    return out


def part_pass(call: Any, backbone: Any, part: Part, **kwargs: Any) -> Any:
    """The part's prefix through ``backbone`` once at batch 1, its cache expanded to the part's rows, then ``call``
    (the model or its backbone) on the suffixes with that cache."""
    if part.shared:
        cache = backbone(input_ids=part.prefix[None], use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(part.rows))  # differentiable: the rows' gradients sum into the prefix
        kwargs["past_key_values"] = cache
    return call(input_ids=part.ids, attention_mask=part.mask, **kwargs)


def _inner(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT: LoRA layers sit inside


def grpo_logps(model: Any, ids: Any, mask: Any, keep: int, entropy: bool) -> tuple[Any, Any] | None:
    """TRL's per-token completion log-probs (and entropies), ``[B, keep]``, zeros outside the completions, or None to
    fall back; ``shared_prefix_trainer(cls)`` is TRL's GRPO trainer using it."""
    import torch

    labels = ids.masked_fill(mask == 0, -100)  # as TRL scores: the completion's real tokens
    labels[:, :-keep] = -100
    groups = parts(ids, mask, labels, pad=0) if rotary(model) else None
    if groups is None:
        return None
    logps, entropies, order = [], [], []
    for part in groups:
        out = part_pass(model, _inner(model).base_model, part, labels=part.labels, fused_lm_head=True)
        # the head's outputs are shifted (position t scores token t + 1): completion token k is at start + k - 1
        at = (part.starts[:, None] - 1 + torch.arange(keep, device=ids.device)).clamp(0, out.log_probs.size(1) - 1)
        completion = mask[part.rows, -keep:].bool()
        logps.append(torch.where(completion, out.log_probs.gather(1, at), 0.0))
        if entropy:
            entropies.append(torch.where(completion, out.entropy.gather(1, at), 0.0))
        order += part.rows
    back = torch.tensor(order, device=ids.device).argsort()  # the batch's row order again
    return torch.cat(logps)[back], (torch.cat(entropies)[back] if entropy else None)


def prefix_nll(model: Any, ids: Any, attention: Any, labels: Any, per_row: bool = False) -> Any | None:
    """The mean token NLL over the labels not -100 (``per_row``: each row's sum), the LM head over those positions
    only (None: fall back)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    groups = parts(ids, attention, labels, pad=0) if rotary(model) else None
    if groups is None:
        return None
    inner = _inner(model)
    sums = torch.zeros(ids.size(0), device=ids.device)
    for part in groups:
        hidden = part_pass(inner.base_model, inner.base_model, part).last_hidden_state[:, :-1]
        target = part.labels[:, 1:]
        keep = target != -100
        logits = inner.get_output_embeddings()(hidden[keep]).float()
        rows = torch.tensor(part.rows, device=ids.device)[keep.nonzero()[:, 0]]
        sums = sums.index_add(0, rows, F.cross_entropy(logits, target[keep], reduction="none"))
    return sums if per_row else sums.sum() / (labels[:, 1:] != -100).sum().clamp(min=1)


def group_order(prompt_ids: Any, permutation: Any) -> list[int]:
    """The rows in runs of equal prompts, the runs in the order ``permutation`` first places one of their rows."""
    runs: list[list[int]] = []
    for b in range(prompt_ids.size(0)):
        if runs and bool((prompt_ids[b] == prompt_ids[b - 1]).all()):
            runs[-1].append(b)
        else:
            runs.append([b])
    place = permutation.argsort().tolist()  # where TRL's shuffle would put each row
    return [b for run in sorted(runs, key=lambda r: min(place[b] for b in r)) for b in run]


def shuffle_groups(batch: dict[str, Any]) -> dict[str, Any]:
    """TRL's ``shuffle_sequence_dict`` for a generation batch, with the G rows of each prompt kept together (a run
    of equal ``prompt_ids`` rows; TRL's one ``randperm`` draw orders the runs), so each pass of G rows is one prompt's
    group and its prompt runs once. TRL's own shuffle spread a pass over G prompts that shared only the system turn,
    and computed more tokens per GRPO update (bench/results/learning.md). The gradient is the same sum: a dapo loss
    divides every pass by the generation batch's token count."""
    import torch

    size = len(next(v for v in batch.values() if v is not None))
    order = group_order(batch["prompt_ids"], torch.randperm(size))  # TRL's one draw: the RNG stream is unchanged

    def permute(v: Any) -> Any:
        if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
            return v
        return v[torch.tensor(order)] if isinstance(v, torch.Tensor) else [v[i] for i in order]

    return {key: permute(value) for key, value in batch.items()}


def shared_prefix_trainer(cls: type[Any]) -> type:
    class SharedPrefixGRPOTrainer(cls):

        def _prepare_inputs(self, generation_batch: Any) -> Any:
            import trl.trainer.grpo_trainer as grpo

            trl_shuffle = grpo.shuffle_sequence_dict
            grpo.shuffle_sequence_dict = shuffle_groups  # ty: ignore[invalid-assignment] - TRL's function, swapped
            try:  # TRL shuffles the rows it generated before it splits them into passes: keep each group whole
                return super()._prepare_inputs(generation_batch)
            finally:
                grpo.shuffle_sequence_dict = trl_shuffle

        def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any,
                                               logits_to_keep: int, batch_size: int | None = None,
                                               compute_entropy: bool = False, compute_aux_loss: bool = False,
                                               **kwargs: Any) -> Any:
            import torch

            if compute_aux_loss or any(kwargs.get(k) is not None for k in MULTIMODAL):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                    **kwargs)
            step = batch_size or input_ids.size(0)
            chunks = []
            for start in range(0, input_ids.size(0), step):
                ids, mask = input_ids[start:start + step], attention_mask[start:start + step]
                with self.accelerator.autocast():
                    got = grpo_logps(model, ids, mask, logits_to_keep, compute_entropy)
                if got is None:
                    logps, ent, _ = super()._get_per_token_logps_and_entropies(
                        model, ids, mask, logits_to_keep, None, compute_entropy, False)
                    got = (logps, ent)
                chunks.append(got)
            entropies = torch.cat([e for _, e in chunks]) if compute_entropy else None
            return torch.cat([p for p, _ in chunks]), entropies, None

    return SharedPrefixGRPOTrainer
