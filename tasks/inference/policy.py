"""Policy backends behind one interface (``make_backend``): transformers, vLLM, any OpenAI-compatible server.

The contract (requests, generations, seeds, the text format of tool calls) is in protocol.py; the backends are in
backends.py; vLLM runs in process when importable, else in the .venv-vllm worker (vllm_worker.py).
"""

from __future__ import annotations

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
from flywheel.tasks.inference.vllm_worker import VLLMWorker

_LOADED: dict[tuple[Any, ...], Any] = {}


def make_backend(kind: str, model: str | None, base_url: str | None = None, *, batch_size: int = 8,
                 concurrency: int = 4, native_tools: bool = False, timeout_s: float = 120.0, retries: int = 3,
                 api_key: str | None = None, prefix_cache: bool = True) -> Backend:
    """A backend by name. In-process models are loaded once per process and reused (vLLM takes minutes to start).
    vLLM runs in process when importable here, else in the .venv-vllm worker (``tasks.vllm_worker``)."""
    if kind == "openai":
        if not (base_url and model):
            raise ValueError("backend 'openai' needs --base-url (e.g. http://127.0.0.1:8000/v1) and --model")
        return OpenAIBackend(base_url, model, concurrency, timeout_s, retries, api_key, native_tools)
    if kind not in ("transformers", "vllm"):
        raise ValueError(f"unknown backend {kind!r}; choose transformers, vllm or openai")
    key = (kind, model, batch_size if kind == "transformers" else 0, prefix_cache)
    if key not in _LOADED:
        if kind == "transformers":
            _LOADED[key] = TransformersBackend(model, batch_size, prefix_cache=prefix_cache)
        else:
            import importlib.util

            from flywheel.tasks.inference.models import resolve_model

            if importlib.util.find_spec("vllm") is not None:
                _LOADED[key] = VLLMBackend(model)
            else:
                _LOADED[key] = VLLMWorker(str(resolve_model(model)))
    return _LOADED[key]
