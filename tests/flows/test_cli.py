"""The flywheel CLI: every subcommand has --help; errors are one line that says what to fix."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flywheel.flows.cli import app
from flywheel.tasks.data.seeds import seed_task

runner = CliRunner()


@pytest.mark.parametrize("command", ["generate", "eval", "score", "dedupe", "serve", "profile-reward"])
def test_help(command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


@pytest.mark.integration
def test_the_cli_starts_without_the_heavy_libraries() -> None:
    """Every `flywheel` command (and each CLI call in the tests) imports the CLI first: torch, transformers, TRL,
    Prefect or vLLM loaded there cost 7 s on this VM before anything runs (train.py imported transformers' Trainer
    for a help string). Commands import what they run when they run it."""
    import subprocess
    import sys

    probe = ("import sys, flywheel.flows.cli; print(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'torch', 'transformers', 'trl', 'peft', 'prefect', 'vllm', 'datasets', 'great_expectations', "
             "'distributed', 'polars'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(("option", "value"), [
    ("--prompt-lookup", "-1"), ("--prompt-lookup", "65"), ("--prompt-lookup", "ten"),
    ("--max-body-kb", "0"), ("--max-body-kb", "-5"), ("--max-waiting", "0"), ("--max-waiting", "33"),
])
def test_serve_refuses_a_bad_option_before_it_loads_anything(option: str, value: str) -> None:
    result = runner.invoke(app, ["serve", "--model", "/no/such/checkpoint", option, value])
    assert result.exit_code == 1 and f"Invalid value for '{option}'" in result.output  # before the model loads


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("flywheel ")


def test_score_reports_malformed_lines_and_scores_the_rest(tmp_path, catalog) -> None:
    tools, seeds = catalog
    task = seed_task(seeds[0], tools)
    call = task.reference.calls[0]
    good = {"task": task.model_dump(mode="json"), "completion": json.dumps({"tool": call.tool, "args": call.args})}
    lines = [json.dumps(good), "{broken", json.dumps({"task": good["task"]}),
             json.dumps({**good, "completion": "nope"}), json.dumps({**good, "task": {**good["task"], "env": ""}})]
    src, dst = tmp_path / "rows.jsonl", tmp_path / "scored.jsonl"
    src.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["score", "--verifier", "tool_call", "--input", str(src), "--output", str(dst)])
    assert result.exit_code == 2
    for lineno in (2, 3, 5):
        assert f"rows.jsonl:{lineno}:" in result.output
    scored = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [s["verdict"]["reward"] for s in scored] == [1.0, -1.0]
    assert scored[1]["verdict"]["failure_class"] == "format_error" and scored[0]["completion"] == good["completion"]


def test_score_bad_arguments(tmp_path) -> None:
    result = runner.invoke(app, ["score", "--verifier", "nope", "--input", "x", "--output", "y"])
    assert result.exit_code == 1 and "unknown verifier 'nope'" in result.output
    result = runner.invoke(app, ["score", "--verifier", "tool_call", "--input", str(tmp_path / "missing.jsonl"),
                                 "--output", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_dedupe_command(tmp_path) -> None:
    rows = [{"text": "send the quarterly budget report to maria before friday noon"},
            {"text": "Send the quarterly budget report to Maria before Friday noon!"},
            {"text": "book a table for two at the italian place"}, {"other": 1}]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = runner.invoke(app, ["dedupe", "--input", str(src), "--output", str(dst), "--field", "text"])
    assert result.exit_code == 2 and "in.jsonl:4:" in result.output
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["keep"] for r in out] == [True, False, True]
    assert out[1]["cluster_id"] == out[0]["cluster_id"] != out[2]["cluster_id"]
    result = runner.invoke(app, ["dedupe", "--input", str(src), "--output", str(dst), "--field", "text",
                                 "--threshold", "2"])
    assert result.exit_code == 1 and "threshold" in result.output


def test_generate_bad_options_fail_fast(tmp_path) -> None:
    result = runner.invoke(app, ["generate", "--n", "0", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "--n" in result.output
    result = runner.invoke(app, ["generate", "--n", "5", "--out", str(tmp_path), "--backend", "openai"])
    assert result.exit_code == 1 and "--base-url" in result.output
    result = runner.invoke(app, ["generate", "--n", "5", "--out", str(tmp_path), "--backend", "gpt"])
    assert result.exit_code == 1 and "backend" in result.output
    result = runner.invoke(app, ["generate", "--n", "5", "--out", str(tmp_path), "--parent", str(tmp_path)])
    assert result.exit_code == 1 and "not a published version" in result.output


def test_generate_names_a_bad_seed_line_before_starting_anything(tmp_path, catalog) -> None:
    from flywheel.tasks.data.seeds import env_paths

    (tmp_path / "tool_call.tools.json").write_text(env_paths("tool_call")[1].read_text())
    good = env_paths("tool_call")[0].read_text().splitlines()[0]
    (tmp_path / "tool_call.jsonl").write_text(good + "\n" + good.replace('"templates"', '"templatez"') + "\n")
    result = runner.invoke(app, ["generate", "--n", "5", "--out", str(tmp_path / "o"), "--seeds-dir", str(tmp_path)])
    assert result.exit_code == 1 and "tool_call.jsonl:2: " in result.output
    result = runner.invoke(app, ["generate", "--n", "5", "--out", str(tmp_path / "o"), "--env", "chess"])
    assert (result.exit_code == 1 and "chess.jsonl: seed file not found" in result.output
            and "tool_call" in result.output)
    assert not (tmp_path / "o").exists()


def test_profile_reward_reports_histogram_classes_and_samples(tmp_path) -> None:
    task = {"env": "math", "messages": [{"role": "user", "content": "1/2 + 1/4?"}], "reference": {"answer": "3/4"},
            "meta": {"seed_id": "t"}}
    broken = {**task, "reference": {"answer": None}}
    rows = [{"task": task, "completion": "\\boxed{0.75}"}, {"task": task, "completion": "\\boxed{3/4}"},
            {"task": task, "completion": "\\boxed{1/2} | \\boxed{1}"}, {"task": task, "completion": "no idea"},
            {"task": broken, "completion": "\\boxed{1}"}]
    src = tmp_path / "rollouts.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = runner.invoke(app, ["profile-reward", "--verifier", "math", "--input", str(src)])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "rollouts.profile.md").read_text()
    assert "5 rollouts, 1 with verifier errors" in report and "| 1.0 | 2 | 50.0% |" in report
    assert "| [0, 0.5) | 2 | 50.0% |" in report
    for failure in ("ambiguous_answer", "no_answer", "verifier_error"):
        assert f"| {failure} | 1 |" in report
    assert "\\|" in report, "a | inside a sample must not break the table"


def test_score_and_profile_replay_workplace_trajectories(tmp_path) -> None:
    from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task
    from flywheel.verifiers.envs.workplace.workplace import trajectory_from_calls

    tools = load_tools(env_paths("workplace")[1])
    task = seed_task(load_seeds(env_paths("workplace")[0], tools)[0], tools)
    gold = trajectory_from_calls(task.reference.calls)
    rows = [{"task": task.model_dump(mode="json"), "completion": gold},  # a message list
            {"task": task.model_dump(mode="json"), "completion": json.dumps(gold[:1])},  # its JSON text
            {"task": task.model_dump(mode="json"), "completion": 42}]
    src = tmp_path / "rollouts.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = runner.invoke(app, ["score", "--verifier", "workplace", "--input", str(src), "--output",
                                 str(tmp_path / "s.jsonl")])
    assert result.exit_code == 2 and "rollouts.jsonl:3" in result.output
    scored = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [s["verdict"]["reward"] for s in scored] == [1.0, 0.0]
    assert scored[0]["verdict"]["verifier_version"] and scored[1]["verdict"]["failure_class"] == "incomplete"
    result = runner.invoke(app, ["profile-reward", "--verifier", "workplace", "--input", str(src)])
    report = (tmp_path / "rollouts.profile.md").read_text()
    assert "| incomplete | 1 |" in report and "tool_calls" in report


def test_a_long_path_in_the_cli_output_is_never_broken_across_lines(capsys) -> None:
    """Not a terminal (CI logs, pipes): rich would wrap at 80 columns, splitting a registry path a user copies."""
    from flywheel.flows.cli.base import err

    line = "registry  " + "/a-long-folder-name" * 8 + "/registry (flywheel registry show production --registry ...)"
    err.print(line, highlight=False)
    assert line in capsys.readouterr().err
