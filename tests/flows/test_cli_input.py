"""Careless and hostile input at the CLI boundary: one `error:` line that says what to fix (exit 1), or the bad
lines listed by number with the good ones still processed (exit 2, score and dedupe); never a traceback, never
minutes of work before an expected error, nothing half-written.

The commands whose old behaviour was a flow run (train, ingest, generate with a huge --n) run as a real
subprocess with a timeout; the rest call the typer app in-process like tests/flows/test_cli.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from conftest import eval_dir, restamp
from flywheel.flows.cli import app
from flywheel.tasks.data.seeds import seed_task

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _one_error(text: str) -> str:
    """The output is exactly one `error:` line (and no traceback); returns it."""
    assert "Traceback" not in text, text
    lines = _lines(text)
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), prog_name="flywheel")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _run(*args: str, timeout: float = 60) -> tuple[int, str]:
    """The real entry point; old code that started working on these inputs runs into the timeout."""
    done = subprocess.run([sys.executable, "-m", "flywheel.flows.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


HOSTILE_LINES = [
    (b'{"text": "bad \xff\xfe bytes"}', "not UTF-8 (byte 0xff at column 15); re-encode the file as UTF-8"),
    (b'{"text": "lone \\ud800 surrogate"}', "not JSON: no low surrogate in string: column 16"),
    (b'{"text": "n", "v": NaN}', "not JSON: unexpected character, expected a JSON value: column 20; NaN and "
                               "Infinity are not JSON: write null or a string"),
    (b'{"text": "i", "v": -Infinity}', "NaN and Infinity are not JSON: write null or a string"),
    (b'{"text": "big", "v": 1e400}', "not JSON: number is infinity when parsed as double: column 22"),
]


def test_score_reports_undecodable_and_non_strict_lines_and_scores_the_good_ones(tmp_path, catalog) -> None:
    tools, seeds = catalog
    task = seed_task(seeds[0], tools)
    call = task.reference.calls[0]
    good = orjson.dumps({"task": task.model_dump(mode="json"), "completion": json.dumps({"tool": call.tool,
                                                                                          "args": call.args})})
    hostile = [good.replace(b'"completion"', b'"note":"\xff","completion"'),
               good.replace(b'"completion"', b'"note":"\\udfff","completion"'),
               good.replace(b'"completion"', b'"note":NaN,"completion"'),
               good.replace(b'"completion"', b'"note":Infinity,"completion"')]
    src, dst = tmp_path / "rows.jsonl", tmp_path / "scored.jsonl"
    src.write_bytes(b"\n".join([good, *hostile, good]) + b"\n")
    code, output = _invoke("score", "--verifier", "tool_call", "--input", str(src), "--output", str(dst))
    assert code == 2 and "Traceback" not in output
    lines = _lines(output)
    assert lines[0] == f"scored 2 lines -> {dst}"
    assert lines[1].startswith(f"{src}:2: not UTF-8 (byte 0xff at column ")
    assert lines[2].startswith(f"{src}:3: not JSON: invalid high surrogate in string: column ")
    assert lines[3].startswith(f"{src}:4: not JSON: ") and lines[3].endswith("write null or a string")
    assert lines[4].startswith(f"{src}:5: not JSON: ") and lines[4].endswith("write null or a string")
    assert lines[5:] == ["error: 4 of 6 input lines malformed (listed above; the others were processed)"]
    scored = [orjson.loads(line) for line in dst.read_bytes().splitlines()]  # strict JSON, every line
    assert [s["verdict"]["reward"] for s in scored] == [1.0, 1.0]
    assert _files(tmp_path) == ["rows.jsonl", "scored.jsonl"]


def test_dedupe_writes_strict_json_and_reports_each_hostile_line(tmp_path) -> None:
    from flywheel.tasks.data.dedupe import MAX_TEXT_CHARS

    rows = [b'{"text": "send the quarterly budget report to maria", "n": 12345678901234567}',
            *(line for line, _ in HOSTILE_LINES),
            orjson.dumps({"text": "x" * (MAX_TEXT_CHARS + 1)}),
            b'{"text": "Send the quarterly budget report to Maria!", "s": "\\ud83d\\ude00 \\u00e9"}']
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(b"\n".join(rows) + b"\n")
    code, output = _invoke("dedupe", "--input", str(src), "--output", str(dst), "--field", "text")
    assert code == 2 and "Traceback" not in output
    lines = _lines(output)
    assert lines[0] == f"2 rows, 1 kept, 1 near duplicates -> {dst}"
    for i, (_, message) in enumerate(HOSTILE_LINES):
        assert lines[1 + i].startswith(f"{src}:{i + 2}: ") and message in lines[1 + i], lines[1 + i]
    assert lines[6] == (f"{src}:7: field 'text' has 1,000,001 characters; dedupe compares at most 1,000,000: "
                        "shorten it or compare another field")
    assert lines[7:] == ["error: 6 of 8 input lines malformed (listed above; the others were processed)"]
    out = [orjson.loads(line) for line in dst.read_bytes().splitlines()]
    assert [(r["keep"], r["cluster_id"]) for r in out] == [(True, "line-1"), (False, "line-1")]
    assert out[0]["n"] == 12345678901234567 and out[1]["s"] == "\U0001F600 \u00e9"
    assert b"NaN" not in dst.read_bytes() and b"Infinity" not in dst.read_bytes()
    assert _files(tmp_path) == ["in.jsonl", "out.jsonl"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--unit", "char", "--ngram", "100000"], "error: --ngram must be between 1 and 256 for unit 'char', got 100000"),
    (["--ngram", "65"], "error: --ngram must be between 1 and 64 for unit 'word', got 65"),
    (["--ngram", "0"], "error: --ngram must be between 1 and 64 for unit 'word', got 0"),
    (["--ngram", "1e23"], "error: flywheel dedupe: Invalid value for '--ngram': Input should be a valid integer, "
                          "unable to parse string as an integer (see flywheel dedupe --help)"),
    (["--bogus", "1"], "error: flywheel dedupe: No such option: --bogus (see flywheel dedupe --help)"),
])
def test_dedupe_refuses_unbounded_or_bad_options_before_reading_anything(tmp_path, extra, message) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a b c"}\n')
    code, output = _invoke("dedupe", "--input", str(src), "--output", str(tmp_path / "o.jsonl"), "--field", "text",
                           *extra)
    assert code == 1 and _one_error(output) == message
    assert _files(tmp_path) == ["in.jsonl"]


def test_unusable_outputs_fail_before_any_work(tmp_path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a b c", "task": {}, "completion": "x"}\n')
    (tmp_path / "folder").mkdir()
    cases = [(tmp_path / "folder", f"error: --output {tmp_path / 'folder'} is a directory; name a file"),
             (src / "o.jsonl",
              f"error: --output {src / 'o.jsonl'}: {src} is a file, not a folder; choose another path"),
             (src / "deeper" / "o.jsonl",
              f"error: --output {src / 'deeper' / 'o.jsonl'}: {src} is a file, not a folder; choose another path")]
    for target, message in cases:
        code, output = _invoke("dedupe", "--input", str(src), "--output", str(target), "--field", "text")
        assert code == 1 and _one_error(output) == message
        code, output = _invoke("score", "--verifier", "math", "--input", str(src), "--output", str(target))
        assert code == 1 and _one_error(output) == message
    code, output = _invoke("profile-reward", "--verifier", "math", "--input", str(src), "--report",
                           str(tmp_path / "folder"))
    assert code == 1 and _one_error(output) == f"error: --report {tmp_path / 'folder'} is a directory; name a file"
    code, output = _invoke("dedupe", "--input", str(tmp_path / "folder"), "--output", str(tmp_path / "o"),
                           "--field", "text")
    assert code == 1 and _one_error(output) == f"error: --input {tmp_path / 'folder'} is not a file; name a JSONL file"
    assert _files(tmp_path) == ["folder", "in.jsonl"] and _files(tmp_path / "folder") == []


@pytest.mark.parametrize("content", ["", "\n  \n\n"])
def test_an_empty_input_is_an_error_not_an_empty_result(tmp_path, content: str) -> None:
    """Before: score and dedupe of an empty file printed "0 lines" and wrote an empty output, exit 0."""
    src = tmp_path / "in.jsonl"
    src.write_text(content)
    message = (f"error: --input {src} has no lines (empty or blank): nothing to process; "
               "name the JSONL file with the rows")
    for args in (["score", "--verifier", "math", "--output", str(tmp_path / "o.jsonl")],
                 ["dedupe", "--field", "text", "--output", str(tmp_path / "o.jsonl")],
                 ["profile-reward", "--verifier", "math", "--report", str(tmp_path / "r.md")]):
        code, output = _invoke(*args, "--input", str(src))
        assert code == 1 and _one_error(output) == message, output
    assert _files(tmp_path) == ["in.jsonl"]


_FAILING_FLOW = """
from prefect import flow, task
from flywheel.flows.cli.base import in_api

@task
def publish():
    raise ValueError("OUT/v-x already exists but is not the version this run made: move it away and rerun")

@flow
def generate():
    return publish()

try:
    in_api(generate)
except ValueError as exc:
    print("error:", exc)
"""


@pytest.mark.integration
def test_a_flow_that_fails_on_bad_input_prints_no_traceback_and_loses_no_log() -> None:
    """Before: a ValueError found inside a flow (generate landing on a damaged version) printed two Prefect tracebacks
    before the command's one error line, then "Error logging to API" (the temporary API stopped before the failed
    run's last log records were sent)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # the command's own temporary API
    proc = subprocess.run([sys.executable, "-c", _FAILING_FLOW], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout == ("error: OUT/v-x already exists but is not the version this run made: move it away and "
                           "rerun\n")
    assert "Traceback" not in proc.stderr and "Error logging to API" not in proc.stderr, proc.stderr
    assert "Task run encountered an exception ValueError: OUT/v-x already exists" in proc.stderr  # Failed state


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_output_folder_fails_before_any_work(tmp_path) -> None:
    src, locked = tmp_path / "in.jsonl", tmp_path / "locked"
    src.write_text('{"text": "a b c"}\n')
    locked.mkdir(mode=0o555)
    code, output = _invoke("dedupe", "--input", str(src), "--output", str(locked / "o.jsonl"), "--field", "text")
    assert code == 1 and "cannot create files in" in _one_error(output) and _files(locked) == []


def _tiny_dataset(out: Path, env: str) -> Path:
    """A published version of 6 seed tasks (no Prefect needed)."""
    from flywheel.flows.runtime import REJECT_SCHEMA
    from flywheel.tasks.data.generate import task_row
    from flywheel.tasks.data.publish import publish
    from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools

    tools = load_tools(env_paths(env)[1])
    rows = [task_row(seed_task(s, tools), k) | {"cluster_id": s.id, "group_id": s.id}
            for k, s in enumerate(load_seeds(env_paths(env)[0], tools)[:6])]
    frames = {"train": pl.DataFrame([r | {"split": "train"} for r in rows[:4]]),
              "heldout": pl.DataFrame([r | {"split": "heldout"} for r in rows[4:]]),
              "rejected": pl.DataFrame([], schema=REJECT_SCHEMA)}
    fields = {"env": env, "counts": {"train": 4, "heldout": 2}, "stage_counts": {}, "reject_reasons": {},
              "params": {}, "run_seed": 0, "code_version": "test", "seeds_hash": "test",
              "created_at": "2025-01-01T00:00:00Z"}
    return publish(out, env, frames, fields)


@pytest.mark.integration
def test_generate_refuses_huge_counts_and_corrupted_parents_before_any_flow(tmp_path) -> None:
    good = _tiny_dataset(tmp_path / "ds", "tool_call")
    torn = tmp_path / "torn"
    torn.mkdir()
    for name in ("manifest.json", "heldout.parquet", "rejected.parquet"):
        (torn / name).write_bytes((good / name).read_bytes())
    (torn / "train.parquet").write_bytes(os.urandom(200))
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "manifest.json").write_bytes(b"\xff{not a manifest")
    cases = [(["--n", "100000000000"], "error: --n: Input should be less than or equal to 10000000"),
             (["--n", "1e23"], "error: flywheel generate: Invalid value for '--n': Input should be a valid integer, "
                               "unable to parse string as an integer (see flywheel generate --help)"),
             (["--n", "-5"], "error: --n: Input should be greater than or equal to 1"),
             (["--n", "5", "--seed", str(2**40)], "error: --seed: Input should be less than or equal to 4294967295"),
             (["--n", "5", "--threshold", "inf"], "error: --threshold: Input should be a finite number"),
             (["--n", "5", "--parent", str(torn)], f"error: --parent {torn}: {torn / 'train.parquet'} does not match "
                                                   "manifest.json"),
             (["--n", "5", "--parent", str(garbled)], f"error: --parent {garbled}: {garbled / 'manifest.json'} is not "
                                                      "UTF-8 text; republish the version with `flywheel generate`"),
             (["--n", "5", "--parent", str(tmp_path / "nowhere")], f"error: --parent {tmp_path / 'nowhere'} is not a "
                                                                   "published version folder (no manifest.json)"),
             (["--n", "5", "--out", str(garbled / "manifest.json")],
              f"error: --out {garbled / 'manifest.json'} is a file; name a folder")]
    code, output = _run("generate", "--out", str(tmp_path / "out"), *cases[0][0], timeout=30)  # used to run on
    assert code == 1 and _one_error(output) == cases[0][1]
    for extra, message in cases:
        args = ["generate", "--out", str(tmp_path / "out"), *extra] if "--out" not in extra else ["generate", *extra]
        code, output = _invoke(*args)
        assert code == 1 and _one_error(output).startswith(message), (extra, output)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # ~30 s on 2 busy cores: the training stack's import, once in a subprocess and once here
def test_train_expected_errors_are_one_line_before_any_flow(tmp_path) -> None:
    """In-process (the training stack is imported once); the first case also through the real entry point, where
    a flow run's failure used to print Prefect's traceback before the message."""
    tool, workplace = _tiny_dataset(tmp_path / "ds", "tool_call"), _tiny_dataset(tmp_path / "ds", "workplace")
    garbage = tmp_path / "per_task.parquet"
    garbage.write_bytes(b"PAR1" + os.urandom(100))
    every = tmp_path / "every.parquet"
    pl.DataFrame({"task_id": pl.read_parquet(tool / "train.parquet")["id"], "mark": "never"}).write_parquet(every)
    solved = tmp_path / "solved.parquet"
    pl.DataFrame({"task_id": pl.read_parquet(tool / "train.parquet")["id"], "mark": "always"}).write_parquet(solved)
    out = str(tmp_path / "o")
    cases = [(["train", "--dataset", str(workplace), "--out", out, "--batch-size", "3", "--num-generations", "2"],
              "error: GRPO needs --batch-size (completions per step, 3) to be a multiple of --num-generations (2): "
              "each prompt gets num_generations completions"),
             (["train", "--dataset", str(tool), "--out", out, "--skip-tasks", str(garbage)],
              f"error: --skip-tasks {garbage} is not a per_task.parquet with task_id and mark columns ("),
             (["train", "--dataset", str(tool), "--out", out, "--skip-tasks", str(every)],
              f"error: no train tasks left to train on: --skip-tasks {every} marks all 4 train tasks always or never "
              "solved (check --skip-tasks, --train-on and --train-limit)"),
             (["train", "--dataset", str(tool), "--out", out, "--skip-tasks", str(solved), "--train-on", "failures"],
              f"error: no train tasks left to train on: --skip-tasks {solved} marks all 4 train tasks always solved "
              "(check --skip-tasks, --train-on and --train-limit)"),
             (["train", "--dataset", str(tool), "--out", out, "--train-on", "never"],
              "error: --train-on: Input should be 'mixed' or 'failures'"),
             (["train", "--dataset", str(tool), "--out", out, "--learning-rate", "inf"],
              "error: --learning-rate: Input should be a finite number"),
             (["train", "--dataset", str(tool), "--out", out, "--steps", "100000000000"],
              "error: --steps: Input should be less than or equal to 1000000"),
             (["train", "--dataset", str(tool), "--out", out, "--registry", str(tmp_path / "reg"), "--parent", "v9"],
              f"error: --parent v9: there is no registry at {tmp_path / 'reg'} yet to hold it")]
    code, output = _run(*cases[0][0], timeout=120)
    assert code == 1 and _one_error(output) == cases[0][1]
    for args, message in cases:
        code, output = _invoke(*args)
        assert code == 1 and _one_error(output).startswith(message), (args, output)
    assert not (tmp_path / "o").exists() and _files(tool.parent) == [tool.name]


def test_ingest_expected_errors_are_one_line_before_any_flow(tmp_path) -> None:
    tool = _tiny_dataset(tmp_path / "ds", "tool_call")  # (every env with a tool catalog can be ingested now)
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_bytes((ROOT / "datasets/examples/trajectories.jsonl").read_bytes().splitlines()[0] + b"\n"
                             + b'{"id": "x\xff", "messages": []}\n')
    cases = [([str(tmp_path / "missing.jsonl"), str(tool)],
              f"error: --trajectories {tmp_path / 'missing.jsonl'}: no such file"),
             ([str(trajectories), str(tool)],
              f"error: {trajectories}:2: not UTF-8 (byte 0xff at column 10); re-encode the file as UTF-8"),
             ([str(trajectories), str(tmp_path)], f"error: --dataset {tmp_path} is not a published version folder "
                                                  "(no manifest.json)")]
    for (src, dataset), message in cases:
        code, output = _invoke("ingest", "--trajectories", src, "--dataset", dataset)
        assert code == 1 and _one_error(output).startswith(message), (src, dataset, output)
    assert _files(tool.parent) == [tool.name]


def test_run_refuses_unbounded_sizes_before_any_flow(tmp_path) -> None:
    cases = [(["--n", "100000000000"], "error: --n: Input should be less than or equal to 10000000"),
             (["--seed", str(2**40)], "error: --seed: Input should be less than or equal to 4294967295"),
             (["--grpo-steps", "100000000000"], "error: --grpo-steps: Input should be less than or equal to 100000"),
             (["--profile", "huge"], "error: --profile huge: choose one of default, full, or the path of a .yaml "
                                     "file shaped like flows/profiles/full.yaml"),
             (["--profile", "full", "--n", "5"], "error: --n: Input should be greater than or equal to 20"),
             (["--env", "nope"], "error: --env 'nope' is not an env; choose one of cli, code, math, sql, tool_call, "
                                 "workplace"),
             (["--refill", "-1"], "error: --refill: Input should be greater than or equal to 0"),
             (["--max-tokens", "8"], "error: --max-tokens: Input should be greater than or equal to 16"),
             (["--max-tokens", "100000"], "error: --max-tokens: Input should be less than or equal to 8192"),
             (["--grpo-prompts", "0"], "error: --grpo-prompts: Input should be greater than or equal to 1"),
             (["--lora-targets", "mlp"], "error: --lora-targets: Input should be 'attention' or 'all-linear'"),
             (["--grpo-reward", "partial"], "error: --grpo-reward: Input should be 'verifier' or 'success'"),
             (["--grpo-replay-weight", "-1"],
              "error: --grpo-replay-weight: Input should be greater than or equal to 0"),
             (["--grpo-replay-weight", "inf"], "error: --grpo-replay-weight: Input should be a finite number"),
             (["--eval-backend", "openai"], "error: --eval-backend: Input should be 'auto', 'transformers' or 'vllm'"),
             (["--grpo-rollout-backend", "openai"], "error: --grpo-rollout-backend: Input should be 'auto', "
                                                    "'transformers' or 'vllm'"),
             (["--curriculum", "all"], "error: --curriculum: Input should be 'mixed', 'failures' or 'both'"),
             (["--grpo-replay-focus", "tool"], "error: --grpo-replay-focus: Input should be 'all' or 'tools'"),
             (["--grpo-replay-focus", "tools"], "error: --grpo-replay-focus tools chooses what GRPO replays: give "
                                                "--grpo-replay-weight above 0 too (or drop --grpo-replay-focus)"),
             (["--env", "math", "--grpo-replay-weight", "8", "--grpo-replay-focus", "tools"],
              "error: --grpo-replay-focus tools: math tasks call no tools; use --grpo-replay-focus all"),
             (["--grpo-replay-rows", "0"], "error: --grpo-replay-rows: Input should be greater than or equal to 1"),
             (["--check-interval", "0"], "error: --check-interval: Input should be greater than or equal to 1")]
    for args, message in cases:
        code, output = _invoke("run", "--out", str(tmp_path / "o"), *args)
        assert code == 1 and _one_error(output) == message, (args, output)
    assert not (tmp_path / "o").exists()





def _variant(good: Path, folder: Path, edit: Callable[[Path], None]) -> Path:
    shutil.copytree(good, folder)
    edit(folder)
    return folder


def _edit_report(**fields: Any) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        report = json.loads((folder / "report.json").read_text())
        for key, value in fields.items():
            report[key] = {**report[key], **value} if isinstance(value, dict) else value
        (folder / "report.json").write_text(json.dumps(report))
    return edit


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.integration
def test_promote_expected_errors_are_one_line_before_any_flow(tmp_path, catalog) -> None:
    """Each case used to fail inside the promote flow (Prefect's traceback first) or, a corrupt rollouts file,
    with polars' own traceback; now it is one line before any flow run, and the registry is untouched."""
    from flywheel.tasks.release.registry import Registry

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")  # all the registry needs to register a version
    reg_dir = tmp_path / "reg"
    version = Registry(reg_dir).register(adapter, {"name": "p", "base_model": {}, "dataset": {}, "verifiers": {},
                                                   "training": {}})
    base = eval_dir(tmp_path / "base", catalog, good_every=0, limit=12, bootstrap=100)
    better = eval_dir(tmp_path / "better", catalog, good_every=2, limit=12, bootstrap=100)
    empty = tmp_path / "empty"
    empty.mkdir()
    torn = restamp(_variant(better, tmp_path / "torn",
                            lambda f: (f / "rollouts.parquet").write_bytes(b"PAR1" + os.urandom(64))))
    garbled = _variant(better, tmp_path / "garbled", lambda f: (f / "report.json").write_bytes(b"\xff{"))
    other_data = _variant(better, tmp_path / "other_data", _edit_report(dataset={"content_hash": "d" * 64}))
    other_split = _variant(better, tmp_path / "other_split", _edit_report(split="train"))
    fewer = restamp(_variant(better, tmp_path / "fewer", lambda f: pl.read_parquet(f / "rollouts.parquet").head(5)
                             .write_parquet(f / "rollouts.parquet")))
    columns = restamp(_variant(better, tmp_path / "columns", lambda f: pl.read_parquet(f / "rollouts.parquet")
                               .drop("latency_s").write_parquet(f / "rollouts.parquet")))
    different = "error: the two evals used different datasets or splits: evaluate both on the same version and split"
    cases = [(["--version", "mv-nope"], better, f"error: no version or alias 'mv-nope' in {reg_dir}; known: "),
             ([], empty, f"error: --candidate-eval {empty} is not a finished eval (needs report.json and "
                         "rollouts.parquet from `flywheel eval`)"),
             ([], torn, f"error: --candidate-eval {torn / 'rollouts.parquet'} is not a readable parquet file ("),
             ([], garbled, f"error: --candidate-eval {garbled / 'report.json'} is not a `flywheel eval` report ("),
             ([], columns, f"error: --candidate-eval {columns / 'rollouts.parquet'} has no latency_s column(s): not "
                           "rollouts of `flywheel eval`; run it again"),
             ([], other_data, different),
             ([], other_split, different),
             ([], fewer, "error: baseline and candidate were evaluated on different rollouts (7 (task, sample, seed) "
                         "differ)")]
    before = _tree(reg_dir)
    args = ["promote", "--registry", str(reg_dir), "--baseline-eval", str(base), "--candidate-eval"]
    code, output = _run(*args, str(better), "--version", "mv-nope", timeout=120)  # the real entry point, no API
    assert code == 1 and _one_error(output).startswith(cases[0][2]), output
    for extra, candidate, message in cases:
        code, output = _invoke(*args, str(candidate), *extra)
        assert code == 1 and _one_error(output).startswith(message), (candidate, output)
    assert _tree(reg_dir) == before and Registry(reg_dir).aliases() == {"candidate": version.id}
