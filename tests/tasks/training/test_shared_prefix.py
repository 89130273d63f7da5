"""Shared-prefix training passes (tasks/training/shared_prefix.py): the prompt prefix a batch shares runs once, and
the log-probs, entropies, losses and LoRA gradients are those of TRL's padded pass; anything it cannot share exactly
falls back."""

from __future__ import annotations

from pathlib import Path

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.validate import reference_completion
from flywheel.tasks.training.rollout import prompt


@pytest.fixture(scope="module")
def policy():
    """The embedded model with TRL's fused head (temperature 0.7, as GRPO samples) and a random LoRA adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from flywheel.tasks.inference.models import load_causal_lm, resolve_model

    torch.manual_seed(0)
    model, tokenizer = load_causal_lm(resolve_model(None))
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    return peft.train(), tokenizer


def _tasks(dataset: str, n: int) -> list[Task]:
    import polars as pl

    return [Task.model_validate_json(t) for t in pl.read_parquet(Path(dataset) / "train.parquet")["task"][:n]]


def _two_domains(dataset: str) -> list[Task]:
    """The first train task and the first after it whose tools come from another domain (another catalog in the
    prompt), whatever order generation left them in."""
    tasks = _tasks(dataset, 200)
    domain = lambda t: {tool.name.split(".")[0] for tool in t.tools}  # noqa: E731
    return [tasks[0], next(t for t in tasks[1:] if domain(t) != domain(tasks[0]))]


def _grpo_batch(tokenizer, tasks: list[Task], copies: int):
    """TRL's layout: prompts left-padded, completions (the reference answer cut at varying lengths, then EOS)
    right-padded, as shuffled groups of ``copies`` completions per prompt."""
    import torch

    prompts = [tokenizer(tokenizer.apply_chat_template(prompt(t), tokenize=False, add_generation_prompt=True))
               ["input_ids"] for t in tasks]
    answers = [tokenizer(reference_completion(t), add_special_tokens=False)["input_ids"] for t in tasks]
    rows = [(prompts[i], answers[i][:4 + 3 * c] + [tokenizer.eos_token_id]) for c in range(copies)
            for i in range(len(tasks))]
    pw, cw = max(len(p) for p, _ in rows), max(len(c) for _, c in rows)
    ids = torch.tensor([[0] * (pw - len(p)) + p + c + [0] * (cw - len(c)) for p, c in rows])
    mask = torch.tensor([[0] * (pw - len(p)) + [1] * (len(p) + len(c)) + [0] * (cw - len(c)) for p, c in rows])
    return ids, mask, cw


def _trl_pass(model, ids, mask, keep):
    """TRL 1.16's _get_per_token_logps_and_entropies for a text batch."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def _grads(model) -> list:
    grads = [p.grad.clone() for n, p in model.named_parameters() if "lora_" in n and p.grad is not None]
    model.zero_grad()
    return grads


def test_grpo_log_probs_entropies_and_gradients_match_the_padded_pass(policy, tool_dataset) -> None:
    """Two prompts of different tool domains, 4 completions each, shuffled as TRL shuffles a generation batch: one
    pass per prompt, its whole prompt shared by its 4 rows, and TRL's numbers in TRL's row order."""
    import torch

    from flywheel.tasks.training.shared_prefix import grpo_logps, parts

    model, tokenizer = policy
    ids, mask, keep = _grpo_batch(tokenizer, _two_domains(tool_dataset), copies=4)
    completion = mask[:, -keep:].float()
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    groups = parts(ids, mask, labels, pad=0)
    prompts = mask[:, :-keep].sum(1)
    assert groups is not None and sorted(sorted(g.rows) for g in groups) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert all(g.shared == int(prompts[g.rows[0]]) - 1 for g in groups)  # all of it but the last prompt token
    assert sum(g.shared + g.ids.numel() for g in groups) < ids.numel() / 2

    ref_logps, ref_ent = _trl_pass(model, ids, mask, keep)
    (ref_logps * completion).sum().backward()
    ref_grads = _grads(model)
    logps, ent = grpo_logps(model, ids, mask, keep, entropy=True)
    (logps * completion).sum().backward()
    grads = _grads(model)

    assert logps.shape == ref_logps.shape and float((logps * completion).abs().sum().detach()) > 1.0
    assert torch.allclose(logps, ref_logps, atol=2e-4), float((logps - ref_logps).abs().max())
    assert torch.allclose(ent, ref_ent, atol=2e-4), float((ent - ref_ent).abs().max())
    assert bool((logps[completion == 0] == 0).all())
    assert len(grads) == len(ref_grads) > 0
    for g, r in zip(grads, ref_grads):  # float rounding of sums over ~2,000 positions: relative to the gradient
        assert float((g - r).norm() / r.norm()) < 1e-4, float((g - r).norm() / r.norm())


def test_replay_nll_and_its_gradient_match_the_full_pass(policy, tool_dataset) -> None:
    import torch

    from flywheel.tasks.training.replay import completion_nll, encode
    from flywheel.tasks.training.shared_prefix import prefix_nll

    model, tokenizer = policy
    rows = [encode(tokenizer, t) for t in _tasks(tool_dataset, 5)]
    width = max(len(i) for i, _ in rows)
    ids = torch.tensor([i + [0] * (width - len(i)) for i, _ in rows])
    attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows])
    labels = torch.tensor([[t if m else -100 for t, m in zip(i, mk)] + [-100] * (width - len(i)) for i, mk in rows])
    full = completion_nll(model, ids, attention, labels)
    full.backward()
    ref_grads = _grads(model)
    shared = prefix_nll(model, ids, attention, labels)
    shared.backward()
    grads = _grads(model)
    assert float(shared.detach()) == pytest.approx(float(full.detach()), rel=1e-4)
    assert len(grads) == len(ref_grads) > 0
    for g, r in zip(grads, ref_grads):
        assert float((g - r).norm() / r.norm()) < 1e-4, float((g - r).norm() / r.norm())


def test_the_plan_groups_rows_by_the_prefix_they_share() -> None:
    """Rows in token order, grouped where a shared prefix saves more than a pass costs; capped one short of each
    row's first labelled token; None when nothing is shared."""
    from flywheel.tasks.training.shared_prefix import MIN_SHARED, plan

    domain_a, domain_b = list(range(100, 160)), list(range(200, 260))  # two catalogs of 60 tokens
    rows = [domain_a + [1, 2, 3], domain_b + [4, 5], domain_a + [6, 7], domain_b + [8], domain_a + [9]]
    assert sorted(plan(rows, [len(r) - 1 for r in rows])) == [([0, 2, 4], 60), ([1, 3], 60)]
    assert sorted(plan(rows, [30] * 5)) == [([0, 2, 4], 30), ([1, 3], 30)]  # the labels start inside the catalog
    assert plan(rows, [MIN_SHARED - 1] * 5) is None
    assert plan([list(range(50)), list(range(1, 51))], [49, 49]) is None


def test_what_cannot_be_shared_exactly_falls_back(policy, tool_dataset) -> None:
    """No rotary embeddings (a row's position would change its output), a row with a hole in its mask, one row, or
    rows sharing under MIN_SHARED tokens: None, and the caller runs TRL's pass."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from flywheel.tasks.training.shared_prefix import MIN_SHARED, grpo_logps, parts, rotary

    model, tokenizer = policy
    ids, mask, keep = _grpo_batch(tokenizer, _two_domains(tool_dataset), copies=1)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    assert rotary(model) and not rotary(GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=50)))
    assert parts(ids, mask, labels, pad=0) is not None  # the instructions before the catalog
    holed = mask.clone()
    holed[0, -keep - 3] = 0  # a gap inside row 0's prompt
    assert parts(ids, holed, labels, pad=0) is None
    assert parts(ids[:1], mask[:1], labels[:1], pad=0) is None
    short = ids.clone()
    short[1, int(mask[1].argmax()) + MIN_SHARED - 2] += 1  # the rows part before MIN_SHARED tokens
    assert parts(short, mask, labels, pad=0) is None
    assert grpo_logps(model, short, mask, keep, entropy=False) is None


def test_the_generation_batch_is_shuffled_by_whole_groups_with_trls_one_draw() -> None:
    """TRL shuffles a generation batch's rows before it splits them into passes, so a pass of G rows held G prompts.
    ``shuffle_groups`` moves each prompt's run of rows whole, in the order TRL's own permutation first places one of
    them, every sequence and tensor in unison, 0-dim tensors untouched; it draws what TRL draws (one ``randperm``),
    so the RNG stream after it is TRL's; the trainer swaps it in only while it prepares a batch."""
    import torch
    import trl.trainer.grpo_trainer as grpo
    from trl import GRPOTrainer

    from flywheel.tasks.training.shared_prefix import shared_prefix_trainer, shuffle_groups

    prompts = torch.tensor([[0, 5], [0, 5], [6, 7], [6, 7], [8, 9], [8, 9], [0, 5], [0, 5], [0, 5], [0, 5]])
    batch = {"prompt_ids": prompts, "completion_ids": torch.arange(10)[:, None], "tags": list("abcdefghij"),
             "num_items_in_batch": torch.tensor(10), "old_per_token_logps": None}
    torch.manual_seed(3)
    shuffled = shuffle_groups(batch)
    after = torch.rand(1)
    torch.manual_seed(3)
    place = torch.randperm(10).argsort().tolist()
    assert torch.equal(torch.rand(1), after)  # the same draw as TRL's shuffle
    rows = shuffled["completion_ids"][:, 0].tolist()
    runs = [[0, 1], [2, 3], [4, 5], [6, 7, 8, 9]]  # runs of equal prompts (a prompt drawn twice in a row is one run)
    assert rows == [b for r in sorted(runs, key=lambda r: min(place[b] for b in r)) for b in r]
    assert sorted(rows) == list(range(10)) and rows != list(range(10))
    assert shuffled["tags"] == [batch["tags"][b] for b in rows] and torch.equal(shuffled["prompt_ids"], prompts[rows])
    assert shuffled["num_items_in_batch"] is batch["num_items_in_batch"] and shuffled["old_per_token_logps"] is None
    seen = []

    class Probe(GRPOTrainer):
        def _prepare_inputs(self, generation_batch):
            seen.append(grpo.shuffle_sequence_dict)
            return generation_batch

    trl_shuffle = grpo.shuffle_sequence_dict
    assert object.__new__(shared_prefix_trainer(Probe))._prepare_inputs(batch) is batch
    assert seen == [shuffle_groups] and grpo.shuffle_sequence_dict is trl_shuffle


def test_the_replay_runs_its_whole_step_in_the_first_pass_with_each_pass_term_unchanged(policy, tool_dataset) -> None:
    """Each accumulation pass's replay term stays the mean NLL of its share (rows k, k + parts, ...), but the step's
    first pass computes every share at once (so one catalog's rows share their prefix whichever pass owns them) and
    the later passes add 0: the value and the gradient are the sum of the per-pass terms computed alone."""
    from flywheel.tasks.training.replay import Replay, completion_nll, encode, padded

    model, tokenizer = policy
    replay = Replay(tokenizer, _tasks(tool_dataset, 12), seed=0, rows=5, weight=1.0)
    shares = [replay.draw(3)[k::2] for k in range(2)]
    alone = []
    for share in shares:
        loss = completion_nll(model, *padded([encode(tokenizer, t) for t in share], 0, model.device))
        loss.backward()
        alone.append(float(loss.detach()))
    ref_grads = _grads(model)
    first = replay.nll(model, 3, 2)
    first.backward()
    grads = _grads(model)
    later = replay.nll(model, 3, 2)
    assert float(later) == 0 and not later.requires_grad and replay.calls[3] == 1
    assert float(first.detach()) == pytest.approx(sum(alone), rel=1e-4)
    assert replay.take() == {"replay_nll": pytest.approx(sum(alone) / 2, rel=1e-4)} and replay.take() == {}
    for g, r in zip(grads, ref_grads, strict=True):
        assert float((g - r).norm() / r.norm()) < 1e-4, float((g - r).norm() / r.norm())
    rows = Replay(tokenizer, _tasks(tool_dataset, 12), seed=0, rows=2, weight=1.0)
    assert len([rows.nll(model, 0, 4) for _ in range(4)]) == 4 and len(rows.values) == 2  # more passes than rows
