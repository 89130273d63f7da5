"""Bench: near-duplicate quality and speed on a corpus with planted near duplicates.

Ground truth is exact Jaccard on the same shingles (word 3-grams), for every pair that shares a
shingle (an inverted index makes that exhaustive). Compared in the same run:
- plain: the textbook datasketch loop (one MinHash per document updated shingle by shingle, then
  query and insert in MinHashLSH(threshold=T)),
- stage: tasks.dedupe.near_duplicates (MinHash.bulk + vectorized banding + exact confirmation), on one
  core in process, and with its signatures computed on a 2-worker Dask LocalCluster as the flow does.
Run: .venv/bin/python bench/scripts/dedupe_bench.py [N_DOCS] [WORDS_PER_DOC]
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
import time
from collections import defaultdict

from datasketch import MinHash, MinHashLSH

from flywheel.tasks.data.dedupe import NearDupParams, near_duplicates, shingles, sketch

T = 0.8


def corpus(n: int, words: int, rng: random.Random) -> list[str]:
    vocab = [f"w{i}" for i in range(30000)]
    docs: list[str] = []
    originals: list[int] = []
    for _ in range(n):
        if originals and rng.random() < 0.15:  # a planted near duplicate: 1-3 words replaced
            tokens = docs[rng.choice(originals)].split()
            for _ in range(rng.randint(1, 3)):
                tokens[rng.randrange(len(tokens))] = rng.choice(vocab)
            docs.append(" ".join(tokens))
        else:
            originals.append(len(docs))
            docs.append(" ".join(rng.choice(vocab) for _ in range(words)))
    return docs


def truth(sets: list[set[bytes]]) -> dict[int, set[int]]:
    """For each doc, the earlier docs whose exact Jaccard with it is >= T."""
    index: dict[bytes, list[int]] = defaultdict(list)
    partners: dict[int, set[int]] = defaultdict(set)
    for i, s in enumerate(sets):
        seen: set[int] = set()
        for sh in s:
            seen.update(index[sh])
            index[sh].append(i)
        for j in seen:
            if len(s & sets[j]) / len(s | sets[j]) >= T:
                partners[i].add(j)
    return partners


def score(flagged: dict[int, int], sets: list[set[bytes]], partners: dict[int, set[int]]) -> dict[str, float]:
    correct = sum(1 for i, j in flagged.items() if len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= T)
    found = sum(1 for i in partners if i in flagged)
    return {"precision": round(correct / max(len(flagged), 1), 4), "recall": round(found / max(len(partners), 1), 4),
            "flagged": len(flagged)}


def plain_loop(docs: list[str]) -> dict[int, int]:
    lsh = MinHashLSH(threshold=T, num_perm=128)
    flagged = {}
    for i, doc in enumerate(docs):
        m = MinHash(num_perm=128)
        for s in shingles(doc, 3, "word"):
            m.update(s)
        hits = lsh.query(m)
        if hits:
            flagged[i] = min(hits)
        else:
            lsh.insert(i, m)
    return flagged


def stage(docs: list[str], sketches=None) -> dict[int, int]:
    res = near_duplicates([str(i) for i in range(len(docs))], docs, NearDupParams(threshold=T), sketches=sketches)
    return {i: int(d) for i, d in enumerate(res.duplicate_of) if d is not None}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    words = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    docs = corpus(n, words, random.Random(0))
    docs_sh = [shingles(d, 3, "word") for d in docs]
    sets = [set(s) for s in docs_sh]
    partners = truth(sets)
    t0 = time.perf_counter()
    plain = plain_loop(docs)
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = stage(docs)
    t_stage = time.perf_counter() - t0

    from distributed import Client, LocalCluster

    from flywheel.flows.runtime import chunks

    params = NearDupParams(threshold=T)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
        t0 = time.perf_counter()
        parts = client.gather(client.map(lambda texts: sketch(texts, params), chunks(docs, 5000)))
        import numpy as np

        ours_dask = stage(docs, sketches=([h for hs, _ in parts for h in hs], np.vstack([s for _, s in parts])))
        t_dask = time.perf_counter() - t0
    assert ours_dask == ours
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": f".venv/bin/python bench/scripts/dedupe_bench.py {n} {words}",
        "docs": n, "words_per_doc": words, "true_near_duplicate_docs": len(partners), "threshold": T,
        "plain_datasketch_loop": {**score(plain, sets, partners), "seconds": round(t_plain, 2)},
        "stage_one_core": {**score(ours, sets, partners), "seconds": round(t_stage, 2),
                           "speedup": round(t_plain / t_stage, 1)},
        "stage_dask_2_workers": {"seconds": round(t_dask, 2), "speedup": round(t_plain / t_dask, 1)},
    }, indent=2))


if __name__ == "__main__":
    main()
