"""Stages 2 and 4: exact dedupe by Task.id and near-duplicate removal (MinHash LSH).

Rows are processed in their given order; the first of a group is kept, so the result depends on the input alone.
Near duplicates: word (or char) n-gram shingles hashed with xxhash, signatures from ``datasketch.MinHash.bulk``
(affine32 scheme), candidates from LSH banding (``datasketch.MinHashLSH``'s scheme: ``bands`` bands of
``num_perm / bands`` rows; a shared band is a candidate), the band keys computed for all rows at once in numpy
(MinHashLSH's per-row Python work cost more than everything else together). Each candidate is confirmed by exact
Jaccard on the shingle sets, so precision is exact and recall is the banding's. A row whose Jaccard with an
earlier kept row or a reference row (seeds, earlier dataset versions) reaches the threshold is not kept; its
``cluster_id`` is that of the row it duplicates, else its own id. Bounded: ``ngram`` is at most ``MAX_NGRAM[unit]``
and shingles are cut one at a time from the normalized text, so a row costs memory in proportion to its length;
the CLI also refuses texts over ``MAX_TEXT_CHARS``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import xxhash

NUM_PERM = 64
SCHEME = "affine32"  # datasketch 2.0 default; stored with signatures (older ones are not comparable)
_WORD = re.compile(r"\w+")
MAX_NGRAM = {"word": 64, "char": 256}  # past these a shingle is the whole text of any realistic row
Unit = Literal["word", "char"]  # what a shingle is cut from: words or characters
MAX_TEXT_CHARS = 1_000_000  # a row's shingle-hash set takes up to ~70 bytes a character: ~70 MB at the cap


@dataclass(frozen=True)
class NearDupParams:
    threshold: float = 0.8
    ngram: int = 3
    unit: Unit = "word"
    num_perm: int = NUM_PERM
    bands: int = 16  # 16 bands x 4 rows: P(candidate) = 0.9998 at J = 0.8; candidates are then confirmed exactly
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.unit not in MAX_NGRAM:
            raise ValueError(f"unit must be 'word' or 'char', got {self.unit!r}")
        if not 1 <= self.ngram <= MAX_NGRAM[self.unit]:
            raise ValueError(f"ngram must be between 1 and {MAX_NGRAM[self.unit]} for unit {self.unit!r}, "
                             f"got {self.ngram}")
        if self.num_perm % self.bands:
            raise ValueError(f"num_perm ({self.num_perm}) must be a multiple of bands ({self.bands})")


def _grams(text: str, ngram: int, unit: str) -> Iterable[str]:
    """The n-grams one at a time (a generator: a long text's shingles are hashed without all being held)."""
    norm = unicodedata.normalize("NFKC", text).casefold()
    if unit == "word":
        words: list[str] = _WORD.findall(norm)
        if len(words) <= ngram:
            return (" ".join(words),)
        return (" ".join(words[i:i + ngram]) for i in range(len(words) - ngram + 1))
    chars = " ".join(norm.split())
    if len(chars) <= ngram:
        return (chars,)
    # slices, not zip(*(chars[i:] for i in range(ngram))): that held ngram copies of the text at once
    return (chars[i:i + ngram] for i in range(len(chars) - ngram + 1))


def shingles(text: str, ngram: int, unit: str) -> list[bytes]:
    """Normalized (NFKC, casefolded) distinct n-gram shingles; a short text is one shingle."""
    return [g.encode() for g in dict.fromkeys(_grams(text, ngram, unit))]


def shingle_hashes(text: str, params: NearDupParams) -> list[int]:
    """32-bit xxhash of each distinct shingle: what MinHash hashes and what exact Jaccard compares."""
    return list({xxhash.xxh32_intdigest(g.encode()) for g in _grams(text, params.ngram, params.unit)})


def _prehashed(value: int) -> int:
    return value


def signatures(hashed: Sequence[Sequence[int]], params: NearDupParams) -> np.ndarray:
    """MinHash signatures (n x num_perm, uint64) via ``MinHash.bulk`` over pre-hashed shingles; pure."""
    from datasketch import MinHash  # here, not at the top: importing datasketch takes ~1 s (its async LSH clients)

    hashes = MinHash.bulk(hashed, num_perm=params.num_perm, seed=params.seed, hashfunc=_prehashed, scheme=SCHEME)
    return np.vstack([m.hashvalues for m in hashes]) if hashes else np.zeros((0, params.num_perm), np.uint64)


def sketch(texts: Sequence[str], params: NearDupParams) -> tuple[list[list[int]], np.ndarray]:
    """Shingle hashes and signatures of a partition of texts (what Dask workers compute)."""
    hashed = [shingle_hashes(t, params) for t in texts]
    return hashed, signatures(hashed, params)


def jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def band_keys(sigs: np.ndarray, bands: int) -> list[list[int]]:
    """One 64-bit key per (row, band): a multiply-xorshift mix of the band's hash values."""
    n, num_perm = sigs.shape
    rows = sigs.reshape(n, bands, num_perm // bands).astype(np.uint64)
    keys = np.full((n, bands), np.uint64(0x9E3779B97F4A7C15), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(rows.shape[2]):
            keys = (keys ^ rows[:, :, j]) * np.uint64(0xBF58476D1CE4E5B9)
            keys ^= keys >> np.uint64(31)
    keys += np.arange(bands, dtype=np.uint64)  # the same values in two bands are different buckets
    return keys.tolist()


class BandIndex:
    """LSH buckets: band key -> indices of the rows inserted under it."""

    def __init__(self) -> None:
        self.buckets: dict[int, int | list[int]] = {}  # a lone index stays an int: most buckets hold one row

    def insert(self, index: int, keys: list[int]) -> None:
        buckets = self.buckets
        for key in keys:
            held = buckets.get(key)
            if held is None:
                buckets[key] = index
            elif isinstance(held, list):
                held.append(index)
            else:
                buckets[key] = [held, index]

    def query(self, keys: list[int]) -> set[int]:
        found: set[int] = set()
        for key in keys:
            held = self.buckets.get(key)
            if held is None:
                continue
            if isinstance(held, list):
                found.update(held)
            else:
                found.add(held)
        return found


@dataclass(frozen=True)
class NearDupResult:
    keep: list[bool]
    cluster_id: list[str]
    duplicate_of: list[str | None]
    similarity: list[float]


def near_duplicates(
    ids: Sequence[str], texts: Sequence[str], params: NearDupParams,
    ref_ids: Sequence[str] = (), ref_texts: Sequence[str] = (),
    sketches: tuple[list[list[int]], np.ndarray] | None = None,
) -> NearDupResult:
    """Greedy first-kept clustering of ``texts`` against references and earlier kept rows.

    ``sketches`` (``sketch`` of rows then references) may be computed
    elsewhere, e.g. partition by partition on Dask.
    """
    hashed, sigs = sketches if sketches is not None else sketch(list(texts) + list(ref_texts), params)
    sets = [set(h) for h in hashed]
    keys = band_keys(sigs, params.bands) if len(sets) else []
    n = len(texts)
    names = list(ids) + [f"ref:{r}" for r in ref_ids]
    cluster = [names[i] if i >= n else "" for i in range(len(names))]
    cluster[n:] = [str(r) for r in ref_ids]
    index = BandIndex()
    for j in range(n, len(names)):
        index.insert(j, keys[j])
    keep, cluster_id, dup_of, sim = [], [], [], []
    for i in range(n):
        best, best_j = 0.0, -1
        for j in sorted(index.query(keys[i])):  # sorted: ties go to the earliest row, whatever the set order
            s = jaccard(sets[i], sets[j])
            if s >= params.threshold and s > best:
                best, best_j = s, j
        if best_j < 0:
            index.insert(i, keys[i])
            cluster[i] = names[i]
        keep.append(best_j < 0)
        cluster_id.append(cluster[best_j] if best_j >= 0 else names[i])
        dup_of.append(names[best_j] if best_j >= 0 else None)
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
