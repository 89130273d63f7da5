"""LLM paraphrase backends for generated requests, and the value-preservation check.

Contract: ``paraphrase(requests, seeds) -> texts`` returns one text per request;
the same requests and seeds give the same texts on the same backend and
machine. Batches are formed from the input order alone (fixed batch size), and
each request carries its row seed (vLLM and OpenAI-compatible servers take it
per request; transformers seeds each batch from its rows' seeds).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Protocol

from flywheel.tasks.data.seeds import format_value
from flywheel.tasks.inference.policy import Backend, Request, Sampling, make_backend

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


NEGATIONS = frozenset({"not", "no", "never", "none", "nothing", "nor", "neither", "without", "except", "excluding",
                       "opposite", "ignore", "instead"})  # "n't" reads "not"


def _kept(value: str, text: str) -> bool:
    """``value`` occurs in ``text`` as a whole: no letter or digit joined to it ('5' is not in 'Top 15', 'Lopez'
    not in 'Lopezova'), nor a part joined by a dot or comma ('330' is not in '330.5', 'a@b.example' not in
    'a@b.example.com')."""
    head = r"(?<!\w)(?<!\w[.,])" if value[:1].isalnum() else ""
    tail = r"(?!\w)(?![.,]\w)" if value[-1:].isalnum() else ""
    return re.search(head + re.escape(value) + tail, text) is not None


def _forms(value: str, original: str) -> set[str]:
    """The value, and the word it sits in where the request joins it to one ('8x' for 8 in 'Solve 8x + 3 = 19')."""
    joined = re.search(r"\w*" + re.escape(value) + r"\w*", original) if value[:1].isalnum() else None
    return {value} | ({joined.group()} if joined else set())


def check_paraphrase(original: str, text: str, values: dict[str, Any]) -> str | None:
    """None when ``text`` keeps every value of ``values`` (the slots the request shows: generation leaves out hidden
    ones, such as workplace record ids and code test inputs), each as a whole (``_kept``) or as the word the request
    wrote it in ('8x' for 8), and as many negations as the request (an LLM told to keep the values can still turn
    the request around: "not returned" -> "returned"; "without" -> "do not" keeps the count); else the reject
    reason detail."""
    cleaned = text.strip()
    if not cleaned:
        return "empty paraphrase"
    if len(cleaned) > 3 * len(original) + 40:
        return "paraphrase far longer than the request"
    lost = [f"{slot}={format_value(v)!r}" for slot, v in values.items()
            if not any(_kept(form, _fold(cleaned)) for form in _forms(_fold(format_value(v)), _fold(original)))]
    if lost:
        return f"lost or changed {', '.join(lost)}"
    said, says = (sum(w in NEGATIONS for w in _words(t)) for t in (original, cleaned))
    if said != says:  # a negation added or dropped: "not returned" -> "returned", "don't send" -> "send"
        return f"{'adds' if says > said else 'drops'} a negation ({said} in the request, {says} in the paraphrase)"
    return None


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", re.sub(r"n['\u2019]t\b", " not", _fold(text)))


class BackendParaphraser:
    """Paraphrases with a policy backend (transformers, vllm, openai): sampled at temperature 0.7, top-p 0.9,
    each request with its row seed (transformers: each batch of 8 under a seed derived from its rows' seeds)."""

    def __init__(self, backend: Backend, max_new_tokens: int = 96) -> None:
        self.backend, self.name = backend, backend.name
        self.sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=max_new_tokens)

    def paraphrase(self, requests: Sequence[str], seeds: Sequence[int]) -> list[str]:
        gens = self.backend.generate([Request(chat(r), [], s) for r, s in zip(requests, seeds)], self.sampling)
        return [g.text for g in gens]


def make_paraphraser(backend: str, model: str | None, base_url: str | None, **options: Any) -> Paraphraser:
    return BackendParaphraser(make_backend(backend, model, base_url, **options))
