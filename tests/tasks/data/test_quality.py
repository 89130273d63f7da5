"""Small datasets pass their own quality suite (issue 18 item 10): generation spreads a small --n over the strata,
the tool-share cap follows n, and a failure names the option that relaxes it; at n=1000 the 0.25 guard holds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from flywheel.flows.config import GenerateConfig
from flywheel.flows.generate import run_generate
from flywheel.flows.stages import load_env
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.quality import QualityParams, allowed_tool_share, failed_expectations, run_suite
from flywheel.tasks.data.seeds import SEEDS_DIR, env_paths, load_tools

TOOL_CALL_TOOLS = tuple(sorted(load_tools(env_paths("tool_call")[1])))


@pytest.mark.slow  # 10-20 s a run on 2 busy cores
@pytest.mark.usefixtures("prefect_api")
@pytest.mark.parametrize(("env", "n", "seed"), [("workplace", 40, 1), ("code", 40, 0), ("workplace", 3, 0)])
def test_small_datasets_pass_their_own_quality_suite(tmp_path, env: str, n: int, seed: int) -> None:
    summary = run_generate(GenerateConfig(env=env, n=n, seed=seed, out=str(tmp_path), workers=1))
    version = Path(summary["version_dir"])
    quality = json.loads((version / "quality.json").read_text())
    assert quality["success"] is True and quality["tool_share"]["rows"] == n
    assert summary["counts"]["train"] + summary["counts"]["heldout"] == n


@pytest.mark.parametrize("env", ["workplace", "code"])
def test_the_first_40_candidates_spread_over_the_strata(env: str) -> None:
    tools, seeds = load_env(str(SEEDS_DIR), env)
    rows, _ = generate_candidates(range(40), seeds, tools, 1)
    # of 40; in seeds-file order workplace's projects held 12 (30%)
    assert max(Counter(r["tool"] for r in rows).values()) == 9


def _table(counts: dict[str, int]) -> pl.DataFrame:
    tools = [tool for tool, k in counts.items() for _ in range(k)]
    return pl.DataFrame({"id": [f"id{i}" for i in range(len(tools))], "row_seed": list(range(len(tools))),
                         "tool": tools, "prompt": ["a long enough prompt"] * len(tools),
                         "env": ["tool_call"] * len(tools)})


def test_the_default_guard_holds_at_n_1000_and_names_the_option() -> None:
    params = QualityParams(envs=("tool_call",), tools=TOOL_CALL_TOOLS)
    assert allowed_tool_share(params, 1000) == 0.25
    even = {tool: 1000 // len(TOOL_CALL_TOOLS) + (i < 1000 % len(TOOL_CALL_TOOLS))
            for i, tool in enumerate(TOOL_CALL_TOOLS)}
    assert run_suite(_table(even), params)["success"]
    skewed = {TOOL_CALL_TOOLS[0]: 300,
              **{tool: 700 // 18 + (i < 700 % 18) for i, tool in enumerate(TOOL_CALL_TOOLS[1:])}}
    result = run_suite(_table(skewed), params)
    assert not result["success"]
    assert failed_expectations(result) == [
        f"expect_column_values_to_be_between(tool_share): {TOOL_CALL_TOOLS[0]!r} holds 30.0% of the 1000 rows, over "
        "the 25.0% allowed (--max-tool-share 0.30 or more relaxes it)"]


def test_a_small_table_fails_only_past_whole_rows_and_says_which_option() -> None:
    params = QualityParams(envs=("tool_call",), tools=TOOL_CALL_TOOLS)
    assert [allowed_tool_share(params, n) for n in (1, 3, 6, 40)] == [1.0, 1 / 3, 2 / 6, 0.25]
    assert run_suite(_table(dict.fromkeys(TOOL_CALL_TOOLS[:3], 1)), params)["success"]
    result = run_suite(_table({TOOL_CALL_TOOLS[0]: 2, TOOL_CALL_TOOLS[1]: 1}), params)
    assert failed_expectations(result) == [
        f"expect_column_values_to_be_between(tool_share): {TOOL_CALL_TOOLS[0]!r} holds 66.7% of the 3 rows, over "
        "the 33.3% allowed (--max-tool-share 0.67 or more relaxes it)"]
    assert allowed_tool_share(QualityParams(envs=(), tools=(), max_tool_share=0.1), 30) == 0.1
