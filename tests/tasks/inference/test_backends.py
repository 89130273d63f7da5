"""LLM paraphrase backends with the real embedded model: in process and over a real HTTP server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from conftest import free_port, need_vllm
from flywheel.flows.config import GenerateConfig
from flywheel.flows.generate import run_generate
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.paraphrase import make_paraphraser
from flywheel.tasks.data.publish import read_manifest
from flywheel.tasks.inference.policy import make_backend
from flywheel.tasks.inference.protocol import Request, Sampling

pytestmark = pytest.mark.slow


def _check_rows(rows, rejects, generator: str, n: int = 8) -> None:
    assert len(rows) + len(rejects) == n
    assert all(r["reason"] == "paraphrase_lost_value" for r in rejects)
    for row in rows:
        assert f'"generator":"{generator}"' in row["task"]


def test_transformers_backend_is_seeded_and_checked(catalog) -> None:
    tools, seeds = catalog
    para = make_paraphraser("transformers", None, None)
    first = generate_candidates(range(4), seeds, tools, 1, para)
    assert generate_candidates(range(4), seeds, tools, 1, para) == first
    _check_rows(*first, "transformers", 4)
    assert first[1], "the 135M model loses values in some paraphrases: they must be rejected with a reason"


def test_flow_with_transformers_backend(tmp_path, prefect_api) -> None:
    # seed 2: 3 of the first 11 candidates keep their values (8 lose one), so one round of 11 makes the 2 rows
    summary = run_generate(GenerateConfig(out=str(tmp_path), n=2, seed=2, backend="transformers",
                                          max_candidates=11, partition_size=8, max_tool_share=1.0))
    manifest = read_manifest(Path(summary["version_dir"]))
    assert manifest.counts["train"] + manifest.counts["heldout"] == 2
    assert manifest.params["backend"] == "transformers"
    assert any(k.startswith("generate:paraphrase_lost_value") for k in manifest.reject_reasons)


@pytest.mark.server
def test_openai_backend_against_a_real_local_server(model_server, catalog) -> None:
    server = model_server
    tools, seeds = catalog
    para = make_paraphraser("openai", "smol", server, concurrency=2)
    first = generate_candidates(range(4), seeds, tools, 2, para)  # one request at a time on the server: 4, not 8
    assert generate_candidates(range(4), seeds, tools, 2, para) == first  # per-request seeds
    _check_rows(*first, "openai", 4)
    assert first[0], "no paraphrase was accepted: the rows' generator tag went unchecked"
    bad = httpx.post(f"{server}/chat/completions", json={"model": "smol", "messages": []})
    assert bad.status_code == 422 and "messages" in bad.text


@pytest.mark.server
def test_openai_backend_retries_then_names_the_failure() -> None:
    para = make_paraphraser("openai", "m", f"http://127.0.0.1:{free_port()}/v1", retries=1, timeout_s=2)
    with pytest.raises(RuntimeError, match="failed after 2 tries"):
        para.paraphrase(["hello"], [1])


@pytest.mark.vllm
def test_vllm_backend_in_process_with_per_request_seeds(catalog) -> None:
    """vllm.LLM in the .venv-vllm worker (deploy/install.sh builds it; CI always does). The worker is loaded
    once per process and shared with tests/flows/test_eval.py's vllm test: one engine start (minutes) for both."""
    need_vllm()
    tools, seeds = catalog
    para = make_paraphraser("vllm", None, None)
    first = generate_candidates(range(8), seeds, tools, 3, para)
    assert first == generate_candidates(range(8), seeds, tools, 3, para), (
        "the same row seeds must give the same paraphrases")
    _check_rows(first[0], first[1], "vllm")
    backend = make_backend("vllm", None)  # the same engine
    hi = Request([{"role": "user", "content": "hi"}], label="task-short")
    too_long = Request([{"role": "user", "content": "word " * 9000}], label="task-long")
    with pytest.raises((ValueError, RuntimeError), match=r"task-long: its prompt is \d+ tokens .* context of 8192"):
        backend.generate([hi, too_long], Sampling(max_tokens=4))  # vLLM's own error named no task
    assert backend.generate([hi], Sampling(temperature=0.0, max_tokens=4))[0].completion_tokens == 4  # still serves


@pytest.mark.parametrize("text", ["0", "1.5", "-0.2", "half", "nan"])
def test_a_bad_vllm_memory_fraction_is_one_clear_error(text) -> None:
    from flywheel.tasks.inference.backends import memory_fraction

    with pytest.raises(ValueError, match=r"FLYWHEEL_VLLM_MEMORY=.* must be a number in \(0, 1\]"):
        memory_fraction(text)
    with pytest.raises(ValueError, match=r"FLYWHEEL_VLLM_ROLLOUT_MEMORY=.* must be a number in \(0, 1\]"):
        memory_fraction(text, "FLYWHEEL_VLLM_ROLLOUT_MEMORY")  # the GRPO rollout engine's own
    assert memory_fraction("0.25") == 0.25


@pytest.mark.parametrize("text", ["-1", "9", "two", "1.5", ""])
def test_a_bad_vllm_ngram_setting_is_one_clear_error(text) -> None:
    from flywheel.tasks.inference.backends import ngram_tokens

    with pytest.raises(ValueError, match=r"FLYWHEEL_VLLM_NGRAM=.*: give the number of speculative tokens, 0 \(off\)"):
        ngram_tokens(text)
    assert ngram_tokens("0") == 0 and ngram_tokens("4") == 4
