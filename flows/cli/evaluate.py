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

from flywheel.flows.cli.base import app, check_output, err, explain, fail, output_or_fail, with_progress
from flywheel.flows.cli.jsonl import parse_line, read_jsonl, report_bad, write_atomic
from flywheel.flows.config import BACKEND_HELP
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
    dataset: Path = typer.Option(..., help="A published dataset version folder (OUT/NAME/VERSION)."),
    split: str = typer.Option("heldout", help="heldout | train"),
    out: Path = typer.Option(..., help="Output folder: report.json, report.md + PNG plots, rollouts.parquet."),
    model: str = typer.Option(None, help="Checkpoint or PEFT adapter folder (transformers, vllm) or served model "
                                         "name (openai); default: the embedded SmolLM2-135M-Instruct."),
    backend: str = typer.Option("auto", help=BACKEND_HELP),
    base_url: str = typer.Option(None, help="openai backend: base URL, e.g. http://127.0.0.1:8000/v1 "
                                            "(API key from $OPENAI_API_KEY)."),
    samples: int = typer.Option(1, help="Samples per task (k of pass@k)."),
    limit: int = typer.Option(None, help="Evaluate only the first N tasks (ordered by task id)."),
    seed: int = typer.Option(0, help="Run seed: every rollout's seed derives from it."),
    batch_size: int = typer.Option(16, help="Rollouts per batch (the unit of resumption)."),
    temperature: float = typer.Option(0.7, help="Sampling temperature (0: greedy)."),
    top_p: float = typer.Option(0.95, help="Nucleus sampling."),
    max_tokens: int = typer.Option(128, help="Max new tokens per reply (per step in agent episodes)."),
    max_steps: int = typer.Option(6, help="Agent episodes (workplace): max policy turns."),
    concurrency: int = typer.Option(4, help="openai backend: requests in flight."),
    native_tools: bool = typer.Option(False, help="openai backend: send tools as OpenAI `tools` "
                                                  "(server-side parsing)."),
    success_threshold: float = typer.Option(1.0, help="A rollout succeeds when its reward reaches this."),
    sft_below_valid: float = typer.Option(0.5, help="Decision: valid-output rate below this -> SFT first."),
    rl_min_pass_at_k: float = typer.Option(0.02, help="Decision: pass@k below this -> SFT first."),
    done_at_pass_at_1: float = typer.Option(0.9, help="Decision: pass@1 at or above this -> done."),
    price_in: float = typer.Option(0.0, help="Cost estimate: USD per 1M prompt tokens."),
    price_out: float = typer.Option(0.0, help="Cost estimate: USD per 1M completion tokens."),
    prefix_cache: bool = typer.Option(True, help="transformers backend: reuse the KV cache of shared prompt prefixes "
                                                 "(--no-prefix-cache: prefill every prompt whole, the old path)."),
) -> None:
    """Evaluate a policy on a published split: metrics with 95% CIs, failure buckets, the SFT/RL/done decision."""
    from flywheel.flows.config import EvalConfig
    from flywheel.flows.eval import run_eval
    from flywheel.schemas import Thresholds
    from flywheel.tasks.inference.models import check_model

    try:
        config = EvalConfig(
            dataset=str(dataset), split=split, out=str(out), model=model, backend=backend, base_url=base_url,
            samples=samples, limit=limit, seed=seed, batch_size=batch_size, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, max_steps=max_steps, concurrency=concurrency, native_tools=native_tools,
            success_threshold=success_threshold, price_in=price_in, price_out=price_out, prefix_cache=prefix_cache,
            thresholds=Thresholds(sft_below_valid=sft_below_valid, rl_min_pass_at_k=rl_min_pass_at_k,
                                  done_at_pass_at_1=done_at_pass_at_1))
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
