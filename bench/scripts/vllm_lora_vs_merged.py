"""Bench: vLLM's own LoRA path against the same adapter merged into its base, on CPU (runs in .venv-vllm).

Prompts: PROMPTS, a JSON list of chat-rendered tool_call eval prompts (64 here, made with
``bench/scripts/generation_throughput.py``'s ``requests`` and the embedded model's chat template). One engine per run
(compiled, prefix caching, bf16 on CPUs with native bf16, 10% of RAM for the KV cache); greedy, up to 96 new tokens;
calls of 16, 16 (the engine warm) and 64 prompts. Prints the start and each call's seconds and tokens.
Run: .venv-vllm/bin/python bench/scripts/vllm_lora_vs_merged.py PROMPTS CHECKPOINT [ADAPTER]
  CHECKPOINT with ADAPTER: vLLM LoRA (enable_lora, a LoRARequest per call); CHECKPOINT alone: plain serving of it
  (the base, or the adapter merged with `flywheel registry export --merged`).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CACHE_ROOT", os.path.expanduser("~/.cache/flywheel/vllm"))
os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.environ["VLLM_CACHE_ROOT"], "inductor"))

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.lora.request import LoRARequest  # noqa: E402

if __name__ == "__main__":
    prompts, checkpoint = json.load(open(sys.argv[1])), sys.argv[2]
    adapter = sys.argv[3] if len(sys.argv) > 3 else None
    t0 = time.time()
    lora = {"enable_lora": True, "max_lora_rank": 16, "max_loras": 1} if adapter else {}
    llm = LLM(model=checkpoint, gpu_memory_utilization=0.1, seed=0, dtype="auto", enable_prefix_caching=True, **lora)
    print("start_s", round(time.time() - t0, 1), flush=True)
    request = LoRARequest("adapter", 1, adapter) if adapter else None
    for n in (16, 16, 64):
        t = time.time()
        outs = llm.generate(prompts[:n], SamplingParams(temperature=0, max_tokens=96), use_tqdm=False,
                            lora_request=request)
        print(n, "prompts", round(time.time() - t, 2), "s", sum(len(o.outputs[0].token_ids) for o in outs),
              "tokens", flush=True)
