"""Policy backends behind one interface (``make_backend``): transformers, vLLM, any OpenAI-compatible server.

The contract (requests, generations, seeds, the text format of tool calls) is in protocol.py; the backends are in
backends.py; vLLM runs in process when importable, else in the .venv-vllm worker (vllm_worker.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.backends import OpenAIBackend, TransformersBackend, VLLMBackend
from flywheel.tasks.inference.protocol import (  # noqa: F401  (re-exported: callers import them from here)
    AGENT_HOWTO,
    Backend,
    Generation,
    Request,
    Sampling,
    as_text_chat,
    batch_seed,
    call_arguments,
    completion_text,
    parse_action,
    signature,
)
from flywheel.tasks.inference.vllm_worker import VLLMWorker, vllm_python

_LOADED: dict[tuple[Any, ...], Any] = {}
AUTO_VLLM_MIN_ROLLOUTS = 100  # "auto" takes vLLM from here on (bench/results/throughput.md)
# agent episodes: vLLM's start is paid back within a few episodes against transformers in lockstep
# (bench/results/throughput.md)
AUTO_VLLM_MIN_EPISODES = 16


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None or vllm_python().exists()


def check_vllm_rollouts(option: str) -> None:
    """What ``--rollout-backend vllm`` (train) and ``--grpo-rollout-backend vllm`` (run) need: vLLM installed;
    ValueError naming ``option`` otherwise."""
    if not vllm_available():
        raise ValueError(f"{option} vllm needs vLLM: run `bash deploy/install.sh` (or set "
                         "FLYWHEEL_VLLM_PYTHON), or drop the option")


def pick_backend(kind: str, rollouts: int, episodes: bool = False) -> str:
    """``auto``: vLLM where it wins (installed, and at least ``AUTO_VLLM_MIN_ROLLOUTS`` rollouts, or
    ``AUTO_VLLM_MIN_EPISODES`` agent episodes, to amortise its start), else transformers; any other name is kept."""
    if kind != "auto":
        return kind
    enough = rollouts >= (AUTO_VLLM_MIN_EPISODES if episodes else AUTO_VLLM_MIN_ROLLOUTS)
    return "vllm" if enough and vllm_available() else "transformers"


def make_backend(kind: str, model: str | None, base_url: str | None = None, *, batch_size: int = 8,
                 concurrency: int = 4, native_tools: bool = False, timeout_s: float = 120.0, retries: int = 3,
                 api_key: str | None = None, prefix_cache: bool = True) -> Backend:
    """A backend by name. In-process models are loaded once per process and reused (vLLM takes a while to start);
    an adapter is keyed by its files' hash, so one retrained in place is loaded anew. One vLLM engine at a time:
    starting another closes the last. vLLM runs in process when importable here, else in the .venv-vllm worker
    (``tasks.vllm_worker``); it serves a PEFT adapter merged into its base (``MergedAdapter``)."""
    if kind == "openai":
        if not (base_url and model):
            raise ValueError("backend 'openai' needs --base-url (e.g. http://127.0.0.1:8000/v1) and --model")
        return OpenAIBackend(base_url, model, concurrency, timeout_s, retries, api_key, native_tools)
    if kind not in ("transformers", "vllm"):
        raise ValueError(f"unknown backend {kind!r}; choose transformers, vllm or openai")
    from flywheel.tasks.inference.models import check_model, fingerprint, is_adapter, resolve_model

    check_model(model)  # before anything loads: vLLM reads a checkpoint folder itself
    path = resolve_model(model)
    files = fingerprint(path) if is_adapter(path) else None
    key = (kind, model, batch_size if kind == "transformers" else 0, prefix_cache, files)
    if key not in _LOADED:
        if kind == "transformers":
            _LOADED[key] = TransformersBackend(model, batch_size, prefix_cache=prefix_cache)
        else:
            release("vllm")
            _LOADED[key] = MergedAdapter(path) if files else start_vllm(str(path))
    return _LOADED[key]


def start_vllm(checkpoint: str, memory: float | None = None, dtype: str | None = None) -> Any:
    """A vLLM engine on a checkpoint, in process when vLLM is importable, else in the .venv-vllm worker; ``memory``:
    the fraction of memory its KV cache reserves (None: ``FLYWHEEL_VLLM_MEMORY``, default 0.3); ``dtype``: vLLM's
    (None: ``FLYWHEEL_VLLM_DTYPE``, else bf16 where the CPU has it natively)."""
    from flywheel.tasks.inference.backends import ngram_tokens

    ngram_tokens(os.environ.get("FLYWHEEL_VLLM_NGRAM", "0"))  # a bad value fails here, not in the worker's log
    if importlib.util.find_spec("vllm") is not None:
        return VLLMBackend(checkpoint, gpu_memory_utilization=memory, dtype=dtype)
    return VLLMWorker(checkpoint, memory=memory, dtype=dtype)


class MergedAdapter:
    """vLLM serving a PEFT adapter: merged into its base in a private temporary folder, which is removed once the
    engine has loaded it: vLLM's own LoRA path is several times slower than the merged model on CPU
    (bench/results/throughput.md). Reports name the adapter, not the merged copy."""

    name = "vllm"

    def __init__(self, adapter: Path) -> None:
        from flywheel.tasks.inference.models import cache_root, export_version

        cache_root().mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".merged-", dir=cache_root()))
        try:
            self.engine = start_vllm(str(export_version(adapter, folder / "model", merged=True)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.model_id = str(adapter)

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        return self.engine.generate(requests, sampling)

    def close(self) -> None:
        if hasattr(self.engine, "close"):
            self.engine.close()


def release(kind: str) -> None:
    """Close and forget the loaded backends of one kind (vLLM's engine holds its KV cache's memory until then):
    training calls it first."""
    for key in [k for k in _LOADED if k[0] == kind]:
        backend = _LOADED.pop(key)
        if hasattr(backend, "close"):
            backend.close()
