"""Stages 2 and 4: exact dedupe by Task.id and near-duplicate removal (MinHash LSH).

Contract:
- Rows are processed in their given order; the first of a group is kept, so
  the result depends on the input alone.
- Near duplicates: word (or char) n-gram shingles hashed with xxhash,
  signatures from ``datasketch.MinHash.bulk``, candidates from
  ``datasketch.MinHashLSH`` with banding chosen for recall, each candidate
  confirmed by exact Jaccard on the shingle sets (so precision is exact).
  A row whose Jaccard with an earlier kept row or a reference row (seeds,
  earlier dataset versions) reaches the threshold is not kept; its
  ``cluster_id`` is that of the row it duplicates, else its own id.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import xxhash
from datasketch import LeanMinHash, MinHash, MinHashLSH

NUM_PERM = 128
SCHEME = "affine32"  # datasketch 2.0 default; stored with signatures (older ones are not comparable)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class NearDupParams:
    threshold: float = 0.8
    ngram: int = 3
    unit: Literal["word", "char"] = "word"
    num_perm: int = NUM_PERM
    bands: int = 32  # 32 bands x 4 rows: ~100% candidate recall at J >= 0.8
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {self.ngram}")
        if self.unit not in ("word", "char"):
            raise ValueError(f"unit must be 'word' or 'char', got {self.unit!r}")
        if self.num_perm % self.bands:
            raise ValueError(f"num_perm ({self.num_perm}) must be a multiple of bands ({self.bands})")


def shingles(text: str, ngram: int, unit: str) -> list[bytes]:
    """Normalized (NFKC, casefolded) n-gram shingles; short texts give one shingle."""
    norm = unicodedata.normalize("NFKC", text).casefold()
    if unit == "word":
        tokens: Sequence[str] = _WORD.findall(norm)
        join = " "
    else:
        tokens, join = " ".join(norm.split()), ""
    if len(tokens) <= ngram:
        return [join.join(tokens).encode()]
    return list({join.join(tokens[i:i + ngram]).encode() for i in range(len(tokens) - ngram + 1)})


def _hash32(data: bytes) -> int:
    return xxhash.xxh32_intdigest(data)


def signatures(shingle_sets: Sequence[Sequence[bytes]], params: NearDupParams) -> np.ndarray:
    """MinHash signatures (n x num_perm, uint64) via ``MinHash.bulk``; pure, partition-safe."""
    hashes = MinHash.bulk(shingle_sets, num_perm=params.num_perm, seed=params.seed, hashfunc=_hash32, scheme=SCHEME)
    return np.vstack([m.hashvalues for m in hashes]) if hashes else np.zeros((0, params.num_perm), np.uint64)


def jaccard(a: set[bytes], b: set[bytes]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


@dataclass(frozen=True)
class NearDupResult:
    keep: list[bool]
    cluster_id: list[str]
    duplicate_of: list[str | None]
    similarity: list[float]


def near_duplicates(
    ids: Sequence[str], texts: Sequence[str], params: NearDupParams,
    ref_ids: Sequence[str] = (), ref_texts: Sequence[str] = (), sigs: np.ndarray | None = None,
) -> NearDupResult:
    """Greedy first-kept clustering of ``texts`` against references and earlier rows.

    ``sigs`` (rows then references, as ``signatures`` returns them) may be
    computed elsewhere, e.g. partition by partition on Dask.
    """
    all_sh = [shingles(t, params.ngram, params.unit) for t in list(texts) + list(ref_texts)]
    if sigs is None:
        sigs = signatures(all_sh, params)
    sets = [set(s) for s in all_sh]
    lsh = MinHashLSH(num_perm=params.num_perm, params=(params.bands, params.num_perm // params.bands))
    n = len(texts)
    names = list(ids) + [f"ref:{r}" for r in ref_ids]
    cluster = {names[n + j]: str(r) for j, r in enumerate(ref_ids)}
    index_of = {name: i for i, name in enumerate(names)}

    def minhash(i: int) -> LeanMinHash:
        return LeanMinHash(seed=params.seed, hashvalues=sigs[i], scheme=SCHEME)

    with lsh.insertion_session() as session:
        for j in range(len(ref_ids)):
            session.insert(names[n + j], minhash(n + j), check_duplication=False)
    keep, cluster_id, dup_of, sim = [], [], [], []
    for i in range(n):
        best, best_j = 0.0, None
        for cand in lsh.query(minhash(i)):
            s = jaccard(sets[i], sets[index_of[cand]])
            if s >= params.threshold and (s > best or (s == best and index_of[cand] < index_of[best_j])):
                best, best_j = s, cand
        if best_j is None:
            lsh.insert(names[i], minhash(i), check_duplication=False)
            cluster[names[i]] = names[i]
        keep.append(best_j is None)
        cluster_id.append(cluster[best_j] if best_j else names[i])
        dup_of.append(best_j)
        sim.append(best)
    return NearDupResult(keep, cluster_id, dup_of, sim)


def exact_dedupe(rows: Iterable[dict[str, Any]], seen: set[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Keep the first row per ``id``; ids in ``seen`` (seeds, earlier rows) are duplicates too."""
    kept, dups = [], []
    seen = set(seen)
    for row in rows:
        (dups if row["id"] in seen else kept).append(row)
        seen.add(row["id"])
    return kept, dups
