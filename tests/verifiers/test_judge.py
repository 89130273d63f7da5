"""The judge verifier against real endpoints on 127.0.0.1: the embedded model behind ``flywheel serve``, a port
nobody listens on, and a server that answers with errors. A failed judge is never reward 0."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import cli_server, free_port
from flywheel.schemas import Task
from flywheel.verifiers import judge

TASK = Task.model_validate({
    "env": "judge", "messages": [{"role": "user", "content": "Name the capital of France."}],
    "reference": {"answer": "Paris", "rubric": "10 if the answer is Paris, else 0."},
    "meta": {"seed_id": "judge-test"}})


@pytest.fixture
def restore_config():
    saved = judge._config
    yield
    judge._config = saved


@pytest.mark.slow
@pytest.mark.server
def test_judge_with_the_embedded_model_is_deterministic_and_never_fakes_a_zero(model_server, restore_config) -> None:
    judge.configure(model_server, "smol")
    verdicts = [judge.verify(TASK, answer) for answer in ("Paris.", "Paris.", "Berlin.")]
    assert verdicts[0] == verdicts[1], "temperature 0 and a fixed seed give the same verdict"
    for v in verdicts:
        assert v.verifier == "judge" and v.verifier_version
        if v.valid:
            assert 0.0 <= v.reward <= 1.0 and v.components["judge_score"] == v.reward * 10
        else:  # a 135M model often answers without a score: that is a judge failure, not a zero
            assert v.reward is None and v.failure_class == "judge_failed" and "Score" in v.details


@pytest.mark.server
def test_unreachable_judge_is_judge_failed(restore_config) -> None:
    judge.configure(f"http://127.0.0.1:{free_port()}/v1", "m", retries=1, timeout_s=2)
    verdict = judge.verify(TASK, "Paris.")
    assert (verdict.valid, verdict.reward, verdict.failure_class) == (False, None, "judge_failed")
    assert "ConnectError" in verdict.details
    assert judge.judge_reward(["Paris."], task=[TASK]) == [None]


@pytest.mark.server
def test_judge_endpoint_answering_errors_is_judge_failed(restore_config) -> None:
    with cli_server(["serve-env"], "/health", timeout_s=60) as base:  # a real server without /chat/completions
        judge.configure(base, "m", retries=0)
        verdict = judge.verify(TASK, "Paris.")
    assert (verdict.valid, verdict.failure_class) == (False, "judge_failed") and "HTTP 404" in verdict.details


@pytest.mark.integration
def test_score_cli_needs_a_judge_endpoint(tmp_path) -> None:
    rows = tmp_path / "rollouts.jsonl"
    rows.write_text(json.dumps({"task": TASK.model_dump(mode="json"), "completion": "Paris"}) + "\n")
    done = subprocess.run([sys.executable, "-m", "flywheel.flows.cli", "score", "--verifier", "judge",
                           "--input", str(rows), "--output", str(tmp_path / "out.jsonl")],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and "--judge-url" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()
