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
from collections import Counter
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
# The direction a word gives a comparison or an order, by the pole it states: a paraphrase keeps how many words of
# each pole the request has ("greater than 7" -> "more than 7" or "above 7", never "at least 7" or "under 7").
# A synonym outside its pole's list is rejected, which only keeps the request as written.
POLES = {w: pole for pole, words in {
    "more": "more greater larger bigger higher above over exceed exceeds exceeding exceeded beyond",
    "less": "less fewer smaller lower below under beneath",
    "most": "most largest biggest highest greatest maximum max top",
    "least": "least smallest lowest fewest minimum min bottom",
    "before": "before earlier prior", "after": "after later since",
    "ascending": "ascending increasing", "descending": "descending decreasing",
    "first": "first oldest earliest", "last": "last newest latest recent",
}.items() for w in words.split()}


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
    the request around: "not returned" -> "returned"; "without" -> "do not" keeps the count) and as many words of
    each comparison or order pole (``POLES``: "greater than 7" -> "at least 7" keeps the 7 and turns the meaning);
    else the reject reason detail."""
    cleaned = text.strip()
    if not cleaned:
        return "empty paraphrase"
    if len(cleaned) > 3 * len(original) + 40:
        return "paraphrase far longer than the request"
    said, says = _fold(original), _fold(cleaned)
    lost = [f"{slot}={format_value(v)!r}" for slot, v in values.items()
            if not any(_kept(form, says) for form in _forms(_fold(format_value(v)), said))]
    if lost:
        return f"lost or changed {', '.join(lost)}"
    words = [_words(t) for t in (said, says)]
    negations = [sum(w in NEGATIONS for w in ws) for ws in words]
    if negations[0] != negations[1]:  # "not returned" -> "returned", "don't send" -> "send"
        return (f"{'adds' if negations[1] > negations[0] else 'drops'} a negation ({negations[0]} in the request, "
                f"{negations[1]} in the paraphrase)")
    poles = [Counter(POLES[w] for w in ws if w in POLES) for ws in words]
    turned = sorted(p for p in poles[0].keys() | poles[1].keys() if poles[0][p] != poles[1][p])
    if turned:
        return (f"changes a comparison or an order ('{turned[0]}' words: {poles[0][turned[0]]} in the request, "
                f"{poles[1][turned[0]]} in the paraphrase)")
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
