"""SFT replay in GRPO: a supervised loss on reference answers of every train task, added to each GRPO update.

Why: GRPO trains on the curriculum's mixed tasks only, and its updates move decisions shared with tasks it never
sees: it broke held-out tasks on tools rare among its training tasks, and a KL term on the training prompts did not
stop it (bench/results/learning.md). A KL only sees the prompts GRPO trains on; replaying reference answers of
every tool keeps what SFT taught on the others. InstructGPT's PPO-ptx mixes pretraining gradients into PPO for the
same reason. ``Replay`` draws and scores the rows, ``replay_trainer`` adds its loss to TRL's GRPO trainer, and
``same_tools`` narrows the pool (``--replay-focus tools``).
"""

from __future__ import annotations

import random
from typing import Any

from flywheel.schemas import Task
from flywheel.tasks.inference.protocol import batch_seed
from flywheel.tasks.training.shared_prefix import prefix_nll

REPLAY_HELP = ("GRPO: weight of an SFT loss on reference answers added to every update (0: none); the answers are "
               "drawn per step from every train task, those --skip-tasks leaves out included, so GRPO's updates "
               "keep what SFT taught on the tasks GRPO does not train on.")
FOCUS_HELP = ("GRPO replay: all (reference answers of every train task) | tools (only of the train tasks that call a "
              "tool GRPO's own tasks call: the other answers of the decisions GRPO changes, e.g. a contact found by "
              "company beside GRPO's tasks that find one by name).")
REPLAY_STREAM = 7  # the replay draws' own seed stream, apart from the rollouts' (seed, step, call, ...)


def same_tools(pool: list[Task], trained: list[Task]) -> list[Task]:
    """The tasks of ``pool`` that call a tool one of ``trained`` calls (reference calls). GRPO on a few failures moves
    those tools' decisions both ways (trained to find a contact by ``name``, it starts to use ``name`` for companies
    too); replaying those tools' other answers holds the other side."""
    tools = {c.tool for t in trained for c in t.reference.calls}
    chosen = [t for t in pool if tools & {c.tool for c in t.reference.calls}]
    if not chosen:
        raise ValueError("--replay-focus tools: no train task calls a tool GRPO's tasks call (an env without tool "
                         "calls?); use --replay-focus all")
    return chosen


def encode(tokenizer: Any, task: Task) -> tuple[list[int], list[int]]:
    """The task's reference conversation as token ids and a 0/1 mask of the tokens the loss is on."""
    from flywheel.tasks.data.validate import reference_completion
    from flywheel.tasks.training.episodes import sft_row
    from flywheel.tasks.training.rollout import prompt
    from flywheel.verifiers.envs import get_env

    if get_env(task.env).multi_turn:
        row = sft_row(tokenizer, task)
        return row["input_ids"], row["assistant_masks"]
    text = tokenizer.apply_chat_template(prompt(task), tokenize=False, add_generation_prompt=True)
    prompt_ids = list(tokenizer(text)["input_ids"])  # as HFChatModel.encode renders a rollout's prompt
    completion = list(tokenizer(reference_completion(task), add_special_tokens=False)["input_ids"])
    completion.append(tokenizer.eos_token_id)  # the rollouts keep it: the policy learns to stop
    return prompt_ids + completion, [0] * len(prompt_ids) + [1] * len(completion)


def completion_nll(model: Any, ids: Any, attention: Any, labels: Any, per_row: bool = False) -> Any:
    """The model's own loss (mean token NLL over the labels not -100; ``per_row``: each row's sum), with the LM head
    over the labelled positions only: a prompt's positions are most of a row, and the head over a 49k vocabulary is a
    third of a step's cost."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT: LoRA layers sit inside
    hidden = inner.base_model(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
    target = labels[:, 1:]
    keep = target != -100
    logits = inner.get_output_embeddings()(hidden[keep])
    if not per_row:
        return F.cross_entropy(logits.float(), target[keep])
    nll = F.cross_entropy(logits.float(), target[keep], reduction="none")
    return torch.zeros(ids.size(0), device=ids.device).index_add(0, keep.nonzero()[:, 0], nll)


class Replay:
    """``nll(model, step, parts)`` draws this step's ``rows`` tasks from ``tasks`` under a seed of (seed, step) (the
    same draw on a resumed run). Each of the step's ``parts`` accumulation passes owns a share (pass k: rows k,
    k + parts, ...) and its term is the mean token negative log-likelihood of its rows' reference completions under
    ``model``: the prompt rendered as the rollouts render it, the completion the reference answer and its
    end-of-sequence token, the loss on the completion tokens only (multi-turn: the gold episode's assistant turns,
    ``episodes.sft_row``); the LM head runs on those tokens only (``completion_nll``: the same value as the model's own
    loss). The step's first pass runs every row at once and returns the sum of the terms (the later passes return 0:
    the step's gradient is the same sum), so with ``shared`` (the default) the rows of one domain's catalog, whichever
    pass owns them, run their common prefix (system turn and tools) once (``shared_prefix.prefix_nll``). ``take()``
    gives the step's mean of the terms as ``replay_nll``."""
    def __init__(self, tokenizer: Any, tasks: list[Task], seed: int, rows: int, weight: float,
                 shared: bool = True) -> None:
        self.tokenizer, self.pool, self.seed, self.shared = tokenizer, sorted(tasks, key=lambda t: t.id), seed, shared
        self.rows, self.weight = min(rows, len(tasks)), weight
        self.encoded: dict[str, tuple[list[int], list[int]]] = {}
        self.calls: dict[int, int] = {}
        self.values: list[float] = []

    def draw(self, step: int) -> list[Task]:
        return random.Random(batch_seed([self.seed, REPLAY_STREAM, step])).sample(self.pool, self.rows)

    def nll(self, model: Any, step: int, parts: int) -> Any:
        import torch

        part = self.calls[step] = self.calls.get(step, -1) + 1
        if part % parts:  # the step's first pass ran every pass's share
            return torch.zeros((), device=model.device)
        tasks = self.draw(step)
        for t in tasks:
            if t.id not in self.encoded:
                self.encoded[t.id] = encode(self.tokenizer, t)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids, attention, labels = padded([self.encoded[t.id] for t in tasks], pad, model.device)
        sums = prefix_nll(model, ids, attention, labels, per_row=True) if self.shared else None
        if sums is None:
            sums = completion_nll(model, ids, attention, labels, per_row=True)
        counts = (labels[:, 1:] != -100).sum(1)
        terms = [sums[k::parts].sum() / counts[k::parts].sum().clamp(min=1)  # pass k's mean, as it had alone
                 for k in range(min(parts, len(tasks)))]  # more passes than rows: the rest replay nothing
        self.values += [float(t.detach()) for t in terms]
        return sum(terms)

    def take(self) -> dict[str, float]:
        out = {"replay_nll": round(sum(self.values) / len(self.values), 5)} if self.values else {}
        self.values = []
        return out


def padded(rows: list[tuple[list[int], list[int]]], pad: int, device: Any) -> tuple[Any, Any, Any]:
    """``encode`` rows right-padded to one width: token ids, attention mask, labels (the scored tokens, -100 else)."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows], device=device)
    attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows], device=device)
    labels = torch.tensor([[t if m else -100 for t, m in zip(i, mask, strict=True)] + [-100] * (width - len(i))
                           for i, mask in rows], device=device)
    return ids, attention, labels


def replay_trainer(cls: type[Any], replay: Replay) -> type:
    """TRL's GRPO trainer class ``cls`` with ``weight * nll / parts`` added to each pass's loss (TRL scales its own
    loss per accumulation pass the same way), so the step's gradient is GRPO's plus ``weight`` times the replay
    NLL's."""
    class ReplayGRPOTrainer(cls):

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if not model.training:
                return loss
            parts = self.current_gradient_accumulation_steps
            return loss + replay.weight * replay.nll(model, self.state.global_step, parts) / parts

    return ReplayGRPOTrainer
