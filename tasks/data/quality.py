"""Stage 5: a Great Expectations suite on the dataset table.

Contract: table-level expectations only (JSON Schema checks happen in
validate.py, where a compiled validator is far faster than GE's per-row
expectation). Returns GE's result as a dict plus ``tool_share`` (the biggest
stratum's share and the share allowed); ``passed`` tells the caller whether to
fail the run, and ``failed_expectations`` says what failed and, for the tool
share, which option relaxes it.

The tool-share cap counts whole rows: a stratum may hold ceil(max_tool_share * n)
of the n rows (below 4 rows a share of 0.25 could otherwise never pass, and at 6
rows over 5 strata neither); at n = 1000 that is the configured 0.25 exactly.
Generation spreads the first rows over the strata (tasks/generate.py), so a small
n meets it.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

MAX_PROMPT_CHARS = 2000  # a task's request; ingest holds production requests to it too


@dataclass(frozen=True)
class QualityParams:
    envs: tuple[str, ...]
    tools: tuple[str, ...]
    min_prompt_chars: int = 10
    max_prompt_chars: int = MAX_PROMPT_CHARS
    max_tool_share: float = 0.25


def allowed_tool_share(params: QualityParams, rows: int) -> float:
    """The cap on one stratum's share of ``rows`` rows: the configured share rounded up to whole rows."""
    if rows < 1:
        return params.max_tool_share
    # the epsilon keeps float noise (0.1 * 30 = 3.0000000000000004) from granting a row the share does not give
    return max(params.max_tool_share, math.ceil(params.max_tool_share * rows - 1e-9) / rows)


def _suite(gx: Any, p: QualityParams) -> Any:
    e = gx.expectations
    suite = gx.ExpectationSuite(name="flywheel_dataset")
    for exp in (
        e.ExpectColumnValuesToNotBeNull(column="id"),
        e.ExpectColumnValuesToBeUnique(column="id"),
        e.ExpectColumnValuesToNotBeNull(column="row_seed"),
        e.ExpectColumnValuesToBeInSet(column="env", value_set=list(p.envs)),
        e.ExpectColumnValuesToBeInSet(column="tool", value_set=list(p.tools)),
        e.ExpectColumnValueLengthsToBeBetween(column="prompt", min_value=p.min_prompt_chars,
                                              max_value=p.max_prompt_chars),
        e.ExpectColumnValuesToBeBetween(column="tool_share", min_value=0, max_value=p.max_tool_share),
        e.ExpectTableRowCountToBeBetween(min_value=1),
    ):
        suite.add_expectation(exp)
    return suite


def table_for_quality(df: pl.DataFrame) -> pl.DataFrame:
    """The columns the suite reads, with each row's tool share of the table."""
    share = pl.len().over("tool") / pl.len()
    return df.select("id", "row_seed", "tool", "prompt", "env", share.alias("tool_share"))


def biggest_stratum(table: pl.DataFrame) -> tuple[str | None, float]:
    """The stratum holding the largest share of the rows, and that share (None, 0.0 for no rows)."""
    if table.height == 0:
        return None, 0.0
    top = table.group_by("tool").len().sort(["len", "tool"], descending=[True, False]).row(0)
    return top[0], top[1] / table.height


def run_suite(df: pl.DataFrame, params: QualityParams) -> dict[str, Any]:
    allowed = allowed_tool_share(params, df.height)
    params = replace(params, max_tool_share=allowed)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    for name in ("great_expectations", "great_expectations.data_context.types.base"):  # the second sets INFO itself
        logging.getLogger(name).setLevel(logging.ERROR)
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (ctx.data_sources.add_pandas("rows").add_dataframe_asset("table")
             .add_batch_definition_whole_dataframe("all"))
    suite = ctx.suites.add(_suite(gx, params))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name="flywheel_dataset", data=batch, suite=suite))
    table = table_for_quality(df)
    result = vd.run(batch_parameters={"dataframe": table.to_pandas()}).describe_dict()
    tool, share = biggest_stratum(table)
    return {**result, "tool_share": {"biggest": tool, "share": share, "allowed": allowed, "rows": df.height}}


def _share_hint(share: dict[str, Any]) -> str:
    needed = math.ceil(share["share"] * 100) / 100
    return (f": {share['biggest']!r} holds {share['share']:.1%} of the {share['rows']} rows, over the "
            f"{share['allowed']:.1%} allowed (--max-tool-share {needed:.2f} or more relaxes it)")


def failed_expectations(result: dict[str, Any]) -> list[str]:
    """One entry per failed expectation, ``type(column)``; the tool share's says how far over and which option
    relaxes it."""
    out = []
    for r in result["expectations"]:
        if r["success"]:
            continue
        column = r["kwargs"].get("column", "table")
        hint = _share_hint(result["tool_share"]) if column == "tool_share" and "tool_share" in result else ""
        out.append(f"{r['expectation_type']}({column}){hint}")
    return out
