"""Stage 5: a Great Expectations suite on the dataset table.

Contract: table-level expectations only (JSON Schema checks happen in
validate.py, where a compiled validator is 500x faster than GE's per-row
expectation). Returns GE's result as a dict; ``passed`` tells the caller
whether to fail the run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import polars as pl


@dataclass(frozen=True)
class QualityParams:
    envs: tuple[str, ...]
    tools: tuple[str, ...]
    min_prompt_chars: int = 10
    max_prompt_chars: int = 2000
    max_tool_share: float = 0.25


def _suite(gx: Any, p: QualityParams) -> Any:
    e = gx.expectations
    suite = gx.ExpectationSuite(name="flywheel_dataset")
    for exp in (
        e.ExpectColumnValuesToNotBeNull(column="id"),
        e.ExpectColumnValuesToBeUnique(column="id"),
        e.ExpectColumnValuesToNotBeNull(column="row_seed"),
        e.ExpectColumnValuesToBeInSet(column="env", value_set=list(p.envs)),
        e.ExpectColumnValuesToBeInSet(column="tool", value_set=list(p.tools)),
        e.ExpectColumnValueLengthsToBeBetween(column="prompt", min_value=p.min_prompt_chars, max_value=p.max_prompt_chars),
        e.ExpectColumnValuesToBeBetween(column="tool_share", min_value=0, max_value=p.max_tool_share),
        e.ExpectTableRowCountToBeBetween(min_value=1),
    ):
        suite.add_expectation(exp)
    return suite


def table_for_quality(df: pl.DataFrame) -> pl.DataFrame:
    """The columns the suite reads, with each row's tool share of the table."""
    share = pl.len().over("tool") / pl.len()
    return df.select("id", "row_seed", "tool", "prompt", "env", share.alias("tool_share"))


def run_suite(df: pl.DataFrame, params: QualityParams) -> dict[str, Any]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(globally=False)
    batch = ctx.data_sources.add_pandas("rows").add_dataframe_asset("table").add_batch_definition_whole_dataframe("all")
    suite = ctx.suites.add(_suite(gx, params))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name="flywheel_dataset", data=batch, suite=suite))
    result = vd.run(batch_parameters={"dataframe": table_for_quality(df).to_pandas()})
    return result.describe_dict()


def failed_expectations(result: dict[str, Any]) -> list[str]:
    return [f"{r['expectation_type']}({r['kwargs'].get('column', 'table')})" for r in result["expectations"] if not r["success"]]
