"""Stage 1: generate task variants from seeds.

Contract:
- Candidate ``k`` (a global index) is variant ``k // S`` of seed ``k % S`` of the
  seeds in balanced order (``balanced``), so a round of candidates is a contiguous
  range of ``k`` and rounds never repeat, and the first ``n`` candidates spread over
  the strata (tool or category) as evenly as the seeds allow: a small ``--n`` is
  not skewed toward the strata listed first in the seeds file.
- ``row_seed = H(run_seed, seed_id, variant)`` drives every choice for the row
  (template, slot values, greeting) and is stored on the row and handed to the
  paraphrase backend, so rows are identical whatever the partitioning.
- Returns (rows, rejects); a reject carries the stage and the reason.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

from flywheel.schemas import Message, SeedTask, Task, TaskMeta, ToolSpec
from flywheel.schemas.seeds import placeholders
from flywheel.tasks.data.paraphrase import Paraphraser, check_paraphrase
from flywheel.tasks.data.samplers import sample
from flywheel.tasks.data.seeds import format_value, render
from flywheel.verifiers.envs import get_env

GREETINGS = ("", "", "Hi! ", "Quick request: ", "Hello. ", "Hey there. ")
SIGN_OFFS = ("", "", " Thanks!", " Thank you.", " Appreciate it.", " ASAP please.")


def row_seed(run_seed: int, seed_id: str, variant: int) -> int:
    digest = hashlib.sha256(f"{run_seed}:{seed_id}:{variant}".encode()).hexdigest()
    return int(digest[:15], 16)  # 60 bits: fits int64 columns


def sample_values(seed: SeedTask, rng: random.Random) -> dict[str, Any]:
    """Slot values in sorted slot order; slots of the same kind get distinct values (lists too: code test inputs)."""
    values: dict[str, Any] = {}
    for slot in sorted(seed.slots):
        kind = seed.slots[slot]
        taken = [v for s, v in values.items() if seed.slots[s] == kind]
        value = sample(kind, rng)
        for _ in range(50):
            if value not in taken:
                break
            value = sample(kind, rng)
        values[slot] = value
    return values


def make_request(seed: SeedTask, values: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
    """The request, and the slot values it shows: its template's (the others are hidden: record ids, test inputs)."""
    template = rng.choice(seed.templates)
    text = template.format(**{k: format_value(v) for k, v in values.items()})
    shown = {k: v for k, v in values.items() if k in placeholders(template)}
    return rng.choice(GREETINGS) + text + rng.choice(SIGN_OFFS), shown


def stratum(seed: SeedTask) -> str:
    """What the split and the quality suite balance on (the env's ``stratum``: the expected tool in tool_call,
    the category by default)."""
    return get_env(seed.env).stratum(seed)


def balanced(seeds: Sequence[SeedTask]) -> list[SeedTask]:
    """Seeds in rounds that visit every stratum once before any twice (strata by first appearance, seeds in file
    order within one): every prefix holds as few seeds of its biggest stratum as the seeds allow."""
    first: dict[str, int] = {}
    seen: dict[str, int] = {}
    keys = []
    for i, seed in enumerate(seeds):
        name = stratum(seed)
        first.setdefault(name, len(first))
        seen[name] = seen.get(name, 0) + 1
        keys.append((seen[name], first[name], i))
    return [seeds[i] for _, _, i in sorted(keys)]


def candidate(k: int, seeds: Sequence[SeedTask], tools: dict[str, ToolSpec],
              run_seed: int) -> tuple[Task, dict[str, Any]]:
    """Candidate ``k`` as a Task plus the slot values it was built from (``seeds`` in file order)."""
    return _candidate(k, balanced(seeds), tools, run_seed)[:2]


def _candidate(k: int, seeds: Sequence[SeedTask], tools: dict[str, ToolSpec],
               run_seed: int) -> tuple[Task, dict[str, Any], dict[str, Any]]:
    """(task, its slot values, the values its request shows)."""
    seed = seeds[k % len(seeds)]
    variant = k // len(seeds)
    rs = row_seed(run_seed, seed.id, variant)
    rng = random.Random(rs)
    values = sample_values(seed, rng)
    request, shown = make_request(seed, values, rng)
    meta = TaskMeta(seed_id=seed.id, generator="sampler", row_seed=rs, variant=variant, category=seed.category)
    return render(seed, tools, request, values, meta), values, shown


def task_row(task: Task, k: int) -> dict[str, Any]:
    """The flat row every stage works on; ``task`` keeps the full Task JSON. ``tool`` is the expected tool,
    or the seed's category (the env's ``task_stratum``; workplace tasks call several tools): the split stratifies
    on it."""
    return {
        "k": k,
        "id": task.id,
        "env": task.env,
        "seed_id": task.meta.seed_id,
        "category": task.meta.category,
        "tool": get_env(task.env).task_stratum(task),
        "prompt": task.prompt,
        "row_seed": task.meta.row_seed,
        "task": task.model_dump_json(),
    }


def reject_row(row: dict[str, Any], stage: str, reason: str, detail: str = "") -> dict[str, Any]:
    return {**row, "stage": stage, "reason": reason, "detail": detail}


def _with_request(task: Task, request: str, generator: str) -> Task:
    messages = task.messages[:-1] + (Message(role="user", content=request),)
    meta = task.meta.model_copy(update={"generator": generator})
    return Task.model_validate({**task.model_dump(), "id": "", "messages": messages, "meta": meta})


def generate_candidates(
    ks: Sequence[int], seeds: Sequence[SeedTask], tools: dict[str, ToolSpec], run_seed: int,
    paraphraser: Paraphraser | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pure and partition-independent: (rows, rejects) for candidate indices ``ks``.

    With a paraphraser, a request whose paraphrase loses or changes a slot value, or turns a negation, a
    comparison or an order around, is rejected (stage ``generate``, reason ``paraphrase_lost_value``).
    """
    order = balanced(seeds)
    built = [_candidate(k, order, tools, run_seed) for k in ks]
    if paraphraser is None:
        return [task_row(task, k) for k, (task, _, _) in zip(ks, built)], []
    texts = paraphraser.paraphrase([t.prompt for t, _, _ in built], [t.meta.row_seed or 0 for t, _, _ in built])
    rows, rejects = [], []
    for k, (task, _, shown), text in zip(ks, built, texts, strict=True):
        problem = check_paraphrase(task.prompt, text, shown)
        if problem:
            rejects.append(reject_row(task_row(task, k), "generate", "paraphrase_lost_value",
                                      f"{problem}: {text[:300]!r}"))
        else:
            rows.append(task_row(_with_request(task, text.strip(), paraphraser.name), k))
    return rows, rejects
