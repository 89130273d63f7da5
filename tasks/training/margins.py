"""How far greedy decoding is from the reference answer: a smooth validation score for checkpoint selection.

Why: at high validation success a small slice has few failures, so greedy success moves by whole tasks and most
checks tie (a tie then fell to the training reward, the same 0/1 outcome again). Teacher-forced margins of the
reference answers read every task's distance from a flip instead, and ranked checkpoints that tied on success the
way a large held-out eval did (bench/results/learning.md).
"""

from __future__ import annotations

import math
from typing import Any

from flywheel.schemas import Task

BATCH = 32  # rows a pass: the prefix sharing groups them within it


def reference_margins(model: Any, tokenizer: Any, tasks: list[Task]) -> list[float]:
    """Per task, with the reference conversation teacher-forced (``replay.encode``: the prompt as the rollouts render
    it, the reference completion and its end-of-sequence token; multi-turn: the gold episode's assistant turns), the
    least over its scored tokens of the reference token's logit minus the best other token's logit. Greedy decoding
    reproduces the reference exactly when the margin is above 0 (a tie aside). The model runs in eval mode without
    gradients and is put back as it was; rows sharing a prefix (system turn and tool catalog) run it once
    (``shared_prefix.parts``)."""
    import torch

    from flywheel.tasks.training.replay import encode

    rows = [encode(tokenizer, t) for t in tasks]
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # one domain's catalog together: one prefix pass
    was_training, out = model.training, [0.0] * len(rows)
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(order), BATCH):
                chunk = order[start:start + BATCH]
                for i, margin in zip(chunk, _batch(model, [rows[i] for i in chunk]), strict=True):
                    out[i] = margin
    finally:
        model.train(was_training)
    return out


def margin_score(margins: list[float]) -> float:
    """The margins' mean sigmoid, in [0, 1]: 1 is every reference decoded with certainty, and a task moving toward a
    flip lowers it before greedy success changes."""
    return sum(1 / (1 + math.exp(-max(m, -50.0))) for m in margins) / len(margins)


def _batch(model: Any, rows: list[tuple[list[int], list[int]]]) -> list[float]:
    import torch

    from flywheel.tasks.training.replay import padded
    from flywheel.tasks.training.shared_prefix import part_pass, parts, rotary

    ids, mask, labels = padded(rows, 0, model.device)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT: LoRA layers sit inside
    groups = parts(ids, mask, labels, pad=0) if rotary(model) else None
    margins = [0.0] * len(rows)
    if groups is None:  # no shared prefix: one plain pass (right padding leaves the real positions as they are)
        hidden = inner.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        groups_out = [(list(range(len(rows))), hidden, labels)]
    else:
        groups_out = [(p.rows, part_pass(inner.base_model, inner.base_model, p).last_hidden_state, p.labels)
                      for p in groups]
    for members, hidden, marks in groups_out:
        target = marks[:, 1:]  # position t scores token t + 1
        keep = target != -100
        logits = inner.get_output_embeddings()(hidden[:, :-1][keep]).float()
        gold = target[keep]
        wanted = logits.gather(1, gold[:, None])[:, 0]
        rival = logits.scatter(1, gold[:, None], float("-inf")).max(1).values
        row_of = keep.nonzero()[:, 0]
        least = torch.full((len(members),), float("inf"), device=logits.device)
        least = least.scatter_reduce(0, row_of, wanted - rival, reduce="amin")
        for k, b in enumerate(members):
            margins[b] = float(least[k])
    return margins
