"""Stage 6: deterministic, stratified train / held-out split and the decontamination gate.

Contract:
- Rows that share a near-duplicate cluster or any word 13-gram of their prompts
  form one group (union-find); a group is never split across sides.
- Within each tool (stratum), groups are ordered by sha256(split_seed, group
  id) and taken into held-out until it holds ``heldout_fraction`` of the
  stratum's rows; a stratum with a single group stays in train.
- The gate: no held-out row may share a 13-gram with a train row or be a near
  duplicate (MinHash LSH, exact Jaccard confirmation) of one. Offenders are
  returned as rejects with the reason, never silently dropped.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from flywheel.tasks.data.dedupe import BandIndex, NearDupParams, band_keys, jaccard, sketch

_WORD = re.compile(r"\w+")


def word_ngrams(text: str, n: int = 13) -> set[str]:
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        self.parent[x] = root
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)  # smallest id is the root: order-independent


def groups(ids: Sequence[str], clusters: Sequence[str], prompts: Sequence[str], ngram: int = 13) -> list[str]:
    uf = _UnionFind()
    first_with: dict[str, str] = {}
    for row_id, cluster, prompt in zip(ids, clusters, prompts, strict=True):
        uf.union(row_id, cluster)
        for gram in word_ngrams(prompt, ngram):
            uf.union(row_id, first_with.setdefault(gram, row_id))
    return [uf.find(i) for i in ids]


def _rank(split_seed: int, group: str) -> str:
    return hashlib.sha256(f"{split_seed}:{group}".encode()).hexdigest()


def assign_splits(tools: Sequence[str], group_ids: Sequence[str], heldout_fraction: float,
                  split_seed: int) -> list[str]:
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    size: dict[str, int] = defaultdict(int)
    stratum: dict[str, str] = {}
    for tool, group in zip(tools, group_ids, strict=True):
        size[group] += 1
        stratum.setdefault(group, tool)
    by_tool: dict[str, list[str]] = defaultdict(list)
    for group, tool in stratum.items():
        by_tool[tool].append(group)
    heldout: set[str] = set()
    for members in by_tool.values():
        if len(members) < 2:
            continue
        target = heldout_fraction * sum(size[g] for g in members)
        taken = 0
        for group in sorted(members, key=lambda g: _rank(split_seed, g))[:-1]:
            if taken + size[group] / 2 > target:
                break
            heldout.add(group)
            taken += size[group]
    return ["heldout" if g in heldout else "train" for g in group_ids]


def contamination(
    train_prompts: Sequence[str], heldout_prompts: Sequence[str], params: NearDupParams, ngram: int = 13
) -> list[tuple[str, str] | None]:
    """Per held-out prompt: None if clean, else (reason, detail)."""
    train_grams: set[str] = set().union(*(word_ngrams(p, ngram) for p in train_prompts)) if train_prompts else set()
    hashed, sigs = sketch(list(train_prompts) + list(heldout_prompts), params)
    train_sh = [set(h) for h in hashed[:len(train_prompts)]]
    held_sh = [set(h) for h in hashed[len(train_prompts):]]
    keys = band_keys(sigs, params.bands) if len(sigs) else []
    index = BandIndex()
    for j in range(len(train_sh)):
        index.insert(j, keys[j])
    out: list[tuple[str, str] | None] = []
    for i, prompt in enumerate(heldout_prompts):
        shared = word_ngrams(prompt, ngram) & train_grams
        if shared:
            out.append(("ngram_overlap", f"shares {ngram}-gram {sorted(shared)[0]!r} with train"))
            continue
        sims = [jaccard(held_sh[i], train_sh[j]) for j in index.query(keys[len(train_sh) + i])]
        best = max(sims, default=0.0)
        out.append(("near_duplicate_of_train", f"Jaccard {best:.3f} with a train row")
                   if best >= params.threshold else None)
    return out


def split_table(rows: list[dict[str, Any]], heldout_fraction: float, split_seed: int,
                ngram: int = 13) -> list[dict[str, Any]]:
    """Rows with ``group_id`` and ``split`` added."""
    gids = groups([r["id"] for r in rows], [r["cluster_id"] for r in rows], [r["prompt"] for r in rows], ngram)
    sides = assign_splits([r["tool"] for r in rows], gids, heldout_fraction, split_seed)
    return [{**r, "group_id": g, "split": s} for r, g, s in zip(rows, gids, sides, strict=True)]
