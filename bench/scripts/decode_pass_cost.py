"""Bench: what one decoding pass of the embedded model costs on this machine (issue 15, goal 3 for a lone episode).

A lone agent episode decodes one token a pass (batch 1), so its speed is the pass's cost. After a 300-token context
in the KV cache, the mean ms of a forward pass that adds K tokens (K=1: plain decoding; K=8: a prompt-lookup
verification of 7 drafts), in fp32 (what the transformers backend runs on CPU) and bf16; and the lm_head's share
(its weight is the tied 49,152 x 576 embedding, 113 MB in fp32): the bytes it reads over its time are the memory
bandwidth a pass gets. If a pass's cost is the weights' bytes over that bandwidth, decoding is memory-bound and
only fewer bytes a token (bf16, int8, or drafts accepted per pass) make it faster.

Run: .venv/bin/python bench/scripts/decode_pass_cost.py [PASSES]   (writes bench/results/data/decode_pass_cost.json)
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import torch

from flywheel.tasks.inference.models import load_causal_lm, resolve_model


def pass_ms(model, k: int, passes: int) -> float:
    """Mean ms of a forward pass adding ``k`` tokens to a 300-token cache (the cache is cut back after each)."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        past = model(torch.randint(100, 40000, (1, 300), generator=gen), use_cache=True).past_key_values
        start = time.perf_counter()
        for _ in range(passes):
            model(torch.randint(100, 40000, (1, k), generator=gen), past_key_values=past, use_cache=True)
            past.crop(-k)
        return (time.perf_counter() - start) / passes * 1000


def lm_head_ms(model, passes: int) -> float:
    weight = model.get_output_embeddings().weight
    hidden = torch.randn(1, weight.shape[1], dtype=weight.dtype)
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(passes):
            hidden @ weight.t()
        return (time.perf_counter() - start) / passes * 1000


def main() -> None:
    passes = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    torch.set_num_threads(2)
    model, _ = load_causal_lm(resolve_model(None))
    model.eval()
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = model.to(dtype)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        head = model.get_output_embeddings().weight
        head_ms = lm_head_ms(model, passes)
        row = {f"pass_ms_k{k}": round(pass_ms(model, k, passes), 1) for k in (1, 8)}
        row |= {"weights_mb": round(weights / 1e6), "lm_head_ms": round(head_ms, 1),
                "lm_head_gb_per_s": round(head.numel() * head.element_size() / head_ms / 1e6, 1)}
        row["weights_over_bandwidth_ms"] = round(weights / 1e6 / row["lm_head_gb_per_s"], 1)
        results[str(dtype).removeprefix("torch.")] = row
        print(row, flush=True)
    record = {"machine": {"cpus": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
                          "platform": platform.platform(), "python": platform.python_version()},
              "command": f"python bench/scripts/decode_pass_cost.py {passes}",
              "model": "embedded SmolLM2-135M-Instruct",
              "context_tokens": 300, "results": results}
    out = Path(__file__).resolve().parents[1] / "results" / "data" / "decode_pass_cost.json"
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
