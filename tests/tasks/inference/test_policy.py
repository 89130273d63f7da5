"""Choosing and loading policy backends and adapters: ``auto`` picks vLLM only where it pays, a loaded model is
never reused for an adapter whose files changed."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from conftest import lora_adapter, need_vllm
from flywheel.tasks.inference.policy import (
    AUTO_VLLM_MIN_EPISODES,
    AUTO_VLLM_MIN_ROLLOUTS,
    Request,
    Sampling,
    make_backend,
    pick_backend,
)


def test_auto_takes_vllm_only_when_installed_and_the_eval_is_long_enough(tmp_path, monkeypatch) -> None:
    python = tmp_path / "python"
    monkeypatch.setenv("FLYWHEEL_VLLM_PYTHON", str(python))  # the .venv-vllm worker's interpreter
    if importlib.util.find_spec("vllm") is None:  # (vLLM lives in .venv-vllm, not in the project's environment)
        assert pick_backend("auto", 10_000) == "transformers", "without vLLM installed, auto must not pick it"
    python.write_text("")
    assert pick_backend("auto", AUTO_VLLM_MIN_ROLLOUTS) == "vllm"
    assert pick_backend("auto", AUTO_VLLM_MIN_ROLLOUTS - 1) == "transformers", "too few rollouts for its start"
    assert pick_backend("auto", AUTO_VLLM_MIN_EPISODES, episodes=True) == "vllm", "episodes gain more per rollout"
    assert pick_backend("auto", AUTO_VLLM_MIN_EPISODES - 1, episodes=True) == "transformers"
    for kind in ("transformers", "vllm", "openai"):
        assert pick_backend(kind, 1) == kind, "a backend named by the user is kept"


@pytest.mark.slow
def test_an_adapter_rewritten_in_place_is_loaded_anew(tmp_path) -> None:
    """make_backend keeps loaded models per process; an adapter retrained into the same folder must not be served
    by the model loaded from its old files."""
    folder = lora_adapter(tmp_path / "adapter", seed=1)
    ask = [Request([{"role": "user", "content": "Name a colour."}], [], 1)]
    greedy = Sampling(temperature=0.0, max_tokens=12)
    first = make_backend("transformers", str(folder))
    assert make_backend("transformers", str(folder)) is first, "the same files: loaded once"
    before = first.generate(ask, greedy)[0].text
    lora_adapter(folder, seed=2)
    second = make_backend("transformers", str(folder))
    assert second is not first and second.generate(ask, greedy)[0].text != before



@pytest.mark.parametrize("said", ["hello", "READY", "READY int8", "READY bfloat16 extra"])
def test_a_worker_that_does_not_say_ready_with_a_dtype_is_stopped_with_what_it_said(tmp_path, monkeypatch,
                                                                                     said) -> None:
    """The worker's first line names the dtype weight syncs are cast to; anything else stops it with a clear error."""
    from flywheel.tasks.inference.vllm_worker import VLLMWorker

    python = tmp_path / "python"  # stands in for .venv-vllm's interpreter: says one line, then waits
    python.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid\necho 'worker log line' >&2\necho '{said}'\n"
                      "exec sleep 600\n")
    python.chmod(0o755)
    monkeypatch.setenv("FLYWHEEL_VLLM_PYTHON", str(python))
    with pytest.raises(RuntimeError, match="did not start") as err:
        VLLMWorker("/no/checkpoint", start_timeout_s=5)
    assert repr(said) in str(err.value) and "bfloat16|float16|float32" in str(err.value)
    assert "worker log line" in str(err.value), "the worker's log tail goes with the error"
    with pytest.raises(ProcessLookupError):  # stopped, not left waiting on its stdin
        os.kill(int((tmp_path / "pid").read_text()), 0)


def test_a_worker_that_exits_at_start_names_its_last_error_line_first(tmp_path, monkeypatch) -> None:
    from flywheel.tasks.inference.vllm_worker import VLLMWorker

    python = tmp_path / "python"  # what vLLM's engine prints when it dies: a traceback with rank prefixes
    python.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                      "echo '[rank0]:   File \"core.py\", line 1' >&2\necho '[rank0]: KeyError: 1' >&2\n"
                      "echo '[rank0]: ValueError: Available memory on node 0 (1/10 GiB) is less' >&2\n"
                      "echo 'INFO shutting down' >&2\nexit 1\n")
    python.chmod(0o755)
    monkeypatch.setenv("FLYWHEEL_VLLM_PYTHON", str(python))
    with pytest.raises(RuntimeError) as err:
        VLLMWorker("/no/checkpoint", start_timeout_s=5)
    first, _, log = str(err.value).partition("; its log ends: ")
    assert first.startswith("the vLLM worker exited (1): ValueError: Available memory on node 0 (1/10 GiB) is less")
    assert "FLYWHEEL_VLLM_MEMORY" in first and "FLYWHEEL_VLLM_ROLLOUT_MEMORY" in first  # the knob to turn
    assert "INFO shutting down" in log


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="vLLM's CPU memory check; a GPU engine differs")
def test_a_real_engine_asking_for_more_memory_than_is_free_says_so_first() -> None:
    """All of the node's RAM as KV cache is never free: the real engine's own error, with our knob, comes first."""
    from flywheel.tasks.inference.models import resolve_model
    from flywheel.tasks.inference.vllm_worker import VLLMWorker

    need_vllm()
    with pytest.raises(RuntimeError) as err:
        VLLMWorker(str(resolve_model(None)), memory=1.0)
    first = str(err.value).partition("; its log ends: ")[0]
    assert first.startswith("the vLLM worker exited (1): ValueError: Available memory on node"), first
    assert "FLYWHEEL_VLLM_MEMORY" in first


def test_a_worker_that_says_nothing_is_stopped_at_its_start_timeout(tmp_path, monkeypatch) -> None:
    from flywheel.tasks.inference.vllm_worker import VLLMWorker

    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid\necho 'loading' >&2\nexec sleep 600\n")
    python.chmod(0o755)
    monkeypatch.setenv("FLYWHEEL_VLLM_PYTHON", str(python))
    with pytest.raises(RuntimeError, match=r"did not start: nothing within 2 s; its log: loading"):
        VLLMWorker("/no/checkpoint", start_timeout_s=2)
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "pid").read_text()), 0)
