"""Evaluation commands: ``eval`` (a policy on a published split), ``score`` and ``profile-reward`` (a verifier
over JSONL lines)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import typer
from pydantic import ValidationError
from rich.console import Console

from flywheel.flows.cli.base import app, check_output, err, explain, fail, option, output_or_fail, with_progress
from flywheel.flows.cli.jsonl import parse_line, read_jsonl, report_bad, write_atomic
from flywheel.flows.config import EvalConfig  # light: pydantic only (no Prefect, no model)
from flywheel.schemas import Thresholds
from flywheel.verifiers import verifier_names  # the env registry's names (no env imported) + judge

VERIFIER_HELP = f"Verifier name, one of {', '.join(verifier_names())}."

def _verifier(name: str, judge_url: str | None, judge_model: str) -> Any:
    """The verifier module by name; the judge gets its endpoint here, and a judge without one is a config error."""
    from flywheel.verifiers import get_verifier

    try:
        module = get_verifier(name)
    except ValueError as exc:
        fail(str(exc))
    if name == "judge":
        url = judge_url or os.environ.get("FLYWHEEL_JUDGE_URL")
        if not url:
            fail("the judge verifier needs an OpenAI-compatible endpoint: pass --judge-url http://127.0.0.1:8000/v1 "
                 "(e.g. `flywheel serve`) or set FLYWHEEL_JUDGE_URL")
        module.configure(url, judge_model or os.environ.get("FLYWHEEL_JUDGE_MODEL", "judge"))
    return module


JUDGE_URL = typer.Option(None, help="judge verifier: OpenAI-compatible base URL (default $FLYWHEEL_JUDGE_URL).")
JUDGE_MODEL = typer.Option(None, help="judge verifier: model name (default $FLYWHEEL_JUDGE_MODEL or 'judge').")


def _score_lines(module: Any, input: Path) -> tuple[list[dict[str, Any]], list[str], int]:
    """Score every {"task", "completion"} line (a progress bar past 10,000 lines); returns scored records,
    bad-line reports (``FILE:LINE: what is wrong``) and the line count."""
    from rich.progress import track

    from flywheel.tasks.evaluation.scoring import score_lines

    rows = read_jsonl(input)
    shown = track(rows, description="score", console=err, transient=True, disable=len(rows) < 10_000)
    out, bad = score_lines(module, shown, parse_line)
    return out, [f"{input}:{lineno}: {explain(exc)}" for lineno, exc in bad], len(rows)


@app.command("eval")
def eval_(
    dataset: Path = option(EvalConfig, "dataset"),
    split: str = option(EvalConfig, "split"),
    out: Path = option(EvalConfig, "out"),
    model: str = option(EvalConfig, "model"),
    backend: str = option(EvalConfig, "backend"),
    base_url: str = option(EvalConfig, "base_url"),
    samples: int = option(EvalConfig, "samples"),
    limit: int = option(EvalConfig, "limit"),
    seed: int = option(EvalConfig, "seed"),
    batch_size: int = option(EvalConfig, "batch_size"),
    temperature: float = option(EvalConfig, "temperature"),
    top_p: float = option(EvalConfig, "top_p"),
    max_tokens: int = option(EvalConfig, "max_tokens"),
    max_steps: int = option(EvalConfig, "max_steps"),
    concurrency: int = option(EvalConfig, "concurrency"),
    native_tools: bool = option(EvalConfig, "native_tools"),
    success_threshold: float = option(EvalConfig, "success_threshold"),
    sft_below_valid: float = option(Thresholds, "sft_below_valid"),
    rl_min_pass_at_k: float = option(Thresholds, "rl_min_pass_at_k"),
    done_at_pass_at_1: float = option(Thresholds, "done_at_pass_at_1"),
    price_in: float = option(EvalConfig, "price_in"),
    price_out: float = option(EvalConfig, "price_out"),
    prefix_cache: bool = option(EvalConfig, "prefix_cache"),
) -> None:
    """Evaluate a policy on a published split: metrics with 95% CIs, failure buckets, the SFT/RL/done decision."""
    from flywheel.flows.eval import run_eval
    from flywheel.tasks.inference.models import check_model

    try:
        config = EvalConfig.model_validate(dict(
            dataset=str(dataset), split=split, out=str(out), model=model, backend=backend, base_url=base_url,
            samples=samples, limit=limit, seed=seed, batch_size=batch_size, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, max_steps=max_steps, concurrency=concurrency, native_tools=native_tools,
            success_threshold=success_threshold, price_in=price_in, price_out=price_out, prefix_cache=prefix_cache,
            thresholds=Thresholds(sft_below_valid=sft_below_valid, rl_min_pass_at_k=rl_min_pass_at_k,
                                  done_at_pass_at_1=done_at_pass_at_1)))
        check_output(out, "--out", folder_wanted=True)
        if config.backend != "openai":  # a local model folder: checked before the flow (openai: a served name)
            check_model(config.model)
        summary = with_progress(lambda: run_eval(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(explain(exc))
    m = summary.metrics
    for name in dict.fromkeys(("valid_output_rate", "correct_tool_rate", "correct_args_rate", "unsafe_action_rate",
                               "pass@1", f"pass@{samples}", "mean_reward", "latency_p95_s")):
        v = m.get(name)
        if v is not None and v.value is not None:
            err.print(f"{name:>20} {v.value:.3f} [{v.lo:.3f}, {v.hi:.3f}]", highlight=False)
    b = summary.batches
    err.print(f"batches: {b.run} run, {b.reused} reused of {b.total}", highlight=False)
    err.print(f"decision: {summary.decision.upper()}: {summary.reason}", highlight=False)
    typer.echo(summary.report)


@app.command()
def score(
    verifier: str = typer.Option(..., help=VERIFIER_HELP),
    input: Path = typer.Option(..., "--input", help='JSONL: {"task": <Task JSON>, "completion": "<text>" '
                                                    'or [messages]} per line (workplace: the trajectory, replayed '
                                                    "in a fresh session)."),
    output: Path = typer.Option(..., help="JSONL: each input line plus its \"verdict\"."),
    judge_url: str = JUDGE_URL,
    judge_model: str = JUDGE_MODEL,
) -> None:
    """Score completions with a verifier. Exit 2 if some lines were malformed (reported by line number)."""
    module = _verifier(verifier, judge_url, judge_model)
    output_or_fail(output, "--output", inputs=(("--input", input),))
    out, bad, total = _score_lines(module, input)
    write_atomic(output, [orjson.dumps(r).decode() + "\n" for r in out])
    err.print(f"scored {len(out)} lines -> {output}", highlight=False, markup=False, soft_wrap=True)
    report_bad(bad, total)


@app.command("profile-reward")
def profile_reward(
    verifier: str = typer.Option(..., help=VERIFIER_HELP),
    input: Path = typer.Option(..., "--input", help='Rollouts JSONL: {"task": <Task JSON>, "completion": "<text>"} '
                                                    "per line."),
    report: Path = typer.Option(None, help="Markdown report path (default: INPUT with .profile.md)."),
    samples: int = typer.Option(3, min=0, max=1000, help="Sample outputs shown per score band."),
    judge_url: str = JUDGE_URL,
    judge_model: str = JUDGE_MODEL,
) -> None:
    """Before training: score histogram, failure classes and sample outputs per score band (also as markdown)."""
    from rich.markdown import Markdown

    from flywheel.tasks.evaluation.profile import profile_markdown

    module = _verifier(verifier, judge_url, judge_model)
    target = report or input.with_suffix(".profile.md")
    output_or_fail(target, "--report", inputs=(("--input", input),))
    scored, bad, total = _score_lines(module, input)  # an empty input failed in read_jsonl
    text = profile_markdown(scored, verifier, samples)  # model output's control characters escaped (_cell)
    write_atomic(target, [text])
    Console().print(Markdown(text))
    err.print(f"report -> {target}", highlight=False, markup=False, soft_wrap=True)
    report_bad(bad, total)
