"""The ``flywheel`` command line: subcommands map names to flows and verifiers (the edge).

Exit codes: 0 success; 1 a fatal error, printed as one line that says what to
fix (a bad option value too: usage errors are not click's exit 2 box); 2
(score, dedupe) some input lines were malformed: the good lines were still
processed and every bad line was reported with its number.

Input JSONL (score, profile-reward, dedupe) is read as bytes and parsed with
orjson, strictly: a line that is not UTF-8, holds a lone surrogate escape
(``"\\ud800"``) or NaN/Infinity, or a number out of double range, is a
malformed line; the output is strict JSON (orjson), never NaN or Infinity.
Every option is checked (bounds, files read, --output usable) before any work,
so an expected error never comes after minutes of work or inside a flow's
traceback.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

for _key, _value in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                     "PREFECT_LOGGING_LEVEL": "WARNING", "GX_ANALYTICS_ENABLED": "false"}.items():
    os.environ.setdefault(_key, _value)  # before Prefect is imported: it reads them once

import orjson  # noqa: E402
import typer  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

from flywheel.flows import __version__  # noqa: E402

err = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)  # a path may hold "[/x]"
    raise typer.Exit(code)


class OneLineUsageErrors(TyperGroup):
    """Click's usage errors (``--n 1e23``, an unknown option) as one ``error:`` line and exit 1, like every other
    error: click's boxed usage message exits 2, which this CLI reserves for malformed input lines."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as exc:  # typer's vendored click: UsageError, BadParameter, NoSuchOption...
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `flywheel`: the help (as typer tells it apart)
                err.print(exc.format_message(), highlight=False)
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else ""
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            err.print(f"[red]error:[/red] {escape(where + ' '.join(exc.format_message().split()) + hint)}",
                      highlight=False, soft_wrap=True)
            sys.exit(1)
        except typer.Abort:
            err.print("[red]error:[/red] aborted", highlight=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineUsageErrors, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Flywheel: seeds to verified datasets, verifiers, evaluation and training for RLVR.")


def _one_line(exc: BaseException) -> str:
    from flywheel.verifiers.common import one_line  # only on an error: the verifiers package imports sympy (~0.5 s)

    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        msg = e["msg"].removeprefix("Value error, ")  # a validator's own message already names the option
        return f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {msg}" if e["loc"] else one_line(msg, None)
    return one_line(exc, None)  # whole: the message names the file or option to fix


def _version(value: bool) -> None:
    if value:
        typer.echo(f"flywheel {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version.")) -> None:
    pass


def _progress() -> Progress:
    return Progress(TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=False)


def _in_api(run: Callable[[], Any]) -> Any:
    """Run a flow on PREFECT_API_URL's server, or on a temporary API that never outlives this command."""
    from flywheel.flows.prefect_api import temporary_api

    with temporary_api():
        return run()


def _with_progress(run: Callable[[], Any]) -> Any:
    """Run a flow with a rich progress bar per stage (flows report through flows.runtime.progress)."""
    from flywheel.flows.runtime import set_progress

    with _progress() as bar:
        ids: dict[str, Any] = {}

        def show(stage: str, done: int, total: int) -> None:
            if stage not in ids:
                ids[stage] = bar.add_task(stage, total=total)
            bar.update(ids[stage], completed=done, total=total)

        set_progress(show)
        try:
            return _in_api(run)
        finally:
            set_progress(None)


@app.command()
def generate(
    env: str = typer.Option("tool_call", help="Environment whose seeds to vary (datasets/seeds/ENV.jsonl)."),
    n: int = typer.Option(..., "--n", help="Accepted rows wanted (train + held-out)."),
    seed: int = typer.Option(0, help="Run seed; every row seed derives from it."),
    out: Path = typer.Option(..., help="Output root: the version lands in OUT/NAME/VERSION/."),
    backend: str = typer.Option("sampler", help="sampler | transformers | vllm | openai"),
    model: str = typer.Option(None, help="Checkpoint folder (transformers, vllm) or model name (openai)."),
    base_url: str = typer.Option(None, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1"),
    workers: int = typer.Option(2, help="Dask LocalCluster workers (ignored with --dask-address)."),
    dask_address: str = typer.Option(None, help="Scheduler address of a running Dask cluster."),
    name: str = typer.Option(None, help="Dataset name (default: ENV)."),
    heldout_fraction: float = typer.Option(0.2, help="Share of rows held out, per tool."),
    threshold: float = typer.Option(0.8, help="Jaccard threshold of the near-duplicate stage."),
    max_candidates: int = typer.Option(None, help="Candidate budget (default 5*N+100)."),
    max_tool_share: float = typer.Option(0.25, help="Quality gate: no tool may hold a larger share of the rows."),
    parent: list[Path] = typer.Option([], help="Earlier published version folder(s) to dedupe against."),
    cache_dir: Path = typer.Option(None, help="Stage cache (default OUT/.cache)."),
    seeds_dir: Path = typer.Option(None, help="Folder with ENV.jsonl seeds and ENV.tools.json (default: datasets/seeds)."),
) -> None:
    """Generate, validate, deduplicate, split and publish a dataset version; prints its folder."""
    from flywheel.flows.config import GenerateConfig

    try:
        config = GenerateConfig(env=env, n=n, seed=seed, out=str(out), backend=backend, model=model, base_url=base_url,
                                workers=workers, dask_address=dask_address, name=name, max_candidates=max_candidates,
                                heldout_fraction=heldout_fraction, threshold=threshold, max_tool_share=max_tool_share,
                                parents=tuple(str(p) for p in parent), cache_dir=str(cache_dir) if cache_dir else None,
                                **({"seeds_dir": str(seeds_dir)} if seeds_dir else {}))
        from flywheel.flows.stages import load_env  # Dask, the verifiers: imported once the options passed their checks

        load_env(config.seeds_dir, config.env)  # a bad seed line fails here, before any server starts
        _check_output(Path(config.out), "--out", folder_wanted=True)
        from flywheel.flows.generate import run_generate

        summary = _with_progress(lambda: run_generate(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(_one_line(exc))
    c = summary["counts"]
    err.print(f"train {c['train']}, held-out {c['heldout']}, rejected {c['rejected']} of {c['candidates']} candidates; "
              f"reasons: {summary['reject_reasons']}", highlight=False)
    if summary["cache_hits"]:
        err.print(f"from cache: {', '.join(summary['cache_hits'])}", highlight=False)
    if c["train"] + c["heldout"] < config.n:
        err.print(f"[yellow]only {c['train'] + c['heldout']} of {config.n} rows passed every stage "
                  "(candidate budget spent)[/yellow]")
    typer.echo(summary["version_dir"])


def _read_jsonl(path: Path) -> list[tuple[int, bytes]]:
    """The non-blank lines with their numbers, as bytes: each is decoded on its own, so one line that is not
    UTF-8 is a malformed line (exit 2) and the others are still processed."""
    if not path.exists():
        fail(f"--input {path} does not exist")
    if not path.is_file():
        fail(f"--input {path} is not a file; name a JSONL file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        fail(f"cannot read --input {path}: {exc.strerror or exc}")
    return [(i, line) for i, line in enumerate(data.splitlines(), start=1) if line.strip()]


def _parse_line(line: bytes) -> Any:
    """One JSONL line as strict JSON (RFC 8259 in UTF-8); ValueError with what is wrong and how to fix it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte 0x{line[exc.start]:02x} at column {exc.start + 1}); "
                         "re-encode the file as UTF-8") from None
    try:
        return orjson.loads(text)  # refuses NaN, Infinity, lone surrogates (\ud800) and numbers out of double range
    except orjson.JSONDecodeError as exc:
        hint = "; NaN and Infinity are not JSON: write null or a string" if any(
            w in text for w in ("NaN", "Infinity")) else ""
        where = re.sub(r"line 1 column (\d+) \(char \d+\)", r"column \1", str(exc))  # the line is one line
        raise ValueError(f"not JSON: {where}{hint}") from None


def _check_output(path: Path, option: str, folder_wanted: bool = False) -> None:
    """Fail before any work when ``path`` cannot become a file (or, ``folder_wanted``, a folder): a folder where a
    file goes or a file where a folder goes, or a folder this process may not create files in (tasks.files still
    guards the write itself). Raises ValueError."""
    if folder_wanted and path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path} is a file; name a folder")
    if not folder_wanted and path.is_dir():
        raise ValueError(f"{option} {path} is a directory; name a file")
    if not folder_wanted and path.exists() and not path.is_file():
        return  # a device or FIFO is written through in place: its folder's permissions do not matter
    folder = path if folder_wanted else path.resolve().parent  # a symlink's target is replaced beside the target
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # missing folders are created at write time: the nearest existing one must allow it
    if not folder.is_dir():
        raise ValueError(f"{option} {path}: {folder} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: cannot create files in {folder} (permission denied or read-only); "
                         "choose a path you can write")


def _output_or_fail(path: Path, option: str) -> None:
    try:
        _check_output(path, option)
    except ValueError as exc:
        fail(str(exc))


def _write_jsonl_atomic(path: Path, lines: list[str]) -> None:
    from flywheel.tasks.files import OutputError, write_text_atomic

    try:
        write_text_atomic(path, "".join(lines))
    except OutputError as exc:  # a device, FIFO, folder or full disk: one line, the target untouched
        fail(_one_line(exc))


def _report_bad(bad: list[str], total: int) -> None:
    for line in bad[:20]:
        err.print(f"[yellow]{escape(line)}[/yellow]", highlight=False, soft_wrap=True)  # one line each, unwrapped
    if bad:
        fail(f"{len(bad)} of {total} input lines malformed (listed above; the others were processed)", code=2)


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
    """Score every {"task", "completion"} line; returns scored records, bad-line reports, line count."""
    from rich.progress import track

    from flywheel.schemas import Task

    rows = _read_jsonl(input)
    out: list[dict[str, Any]] = []
    bad: list[str] = []
    tasks: dict[bytes, Task] = {}  # rollouts repeat tasks (k samples, GRPO groups): parse each task once
    for lineno, line in track(rows, description="score", console=err, transient=True, disable=len(rows) < 10_000):
        try:
            record = _parse_line(line)
            if not isinstance(record, dict) or "task" not in record or not isinstance(record.get("completion"), (str, list)):
                raise ValueError('expected an object with "task" (Task JSON) and "completion" (a string, or a list of '
                                 'chat messages: a trajectory)')
            key = orjson.dumps(record["task"], option=orjson.OPT_SORT_KEYS)
            task = tasks.get(key)
            if task is None:
                task = tasks[key] = Task.model_validate(record["task"])
                if len(tasks) > 50_000:
                    tasks.clear()
        except (ValueError, ValidationError) as exc:
            bad.append(f"{input}:{lineno}: {_one_line(exc)}")
            continue
        completion = record["completion"]
        v = module.verify(task, completion if isinstance(completion, str) else orjson.dumps(completion).decode())
        record["verdict"] = {"reward": v.reward, "valid": v.valid, "failure_class": v.failure_class,
                             "components": v.components, "details": v.details, "verifier": v.verifier,
                             "verifier_version": v.verifier_version}
        out.append(record)
    return out, bad, len(rows)


@app.command("eval")
def eval_(
    dataset: Path = typer.Option(..., help="A published dataset version folder (OUT/NAME/VERSION)."),
    split: str = typer.Option("heldout", help="heldout | train"),
    out: Path = typer.Option(..., help="Output folder: report.json, report.md + PNG plots, rollouts.parquet."),
    model: str = typer.Option(None, help="Checkpoint folder (transformers, vllm) or served model name (openai); "
                                         "default: the embedded SmolLM2-135M-Instruct."),
    backend: str = typer.Option("transformers", help="transformers | vllm | openai"),
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
    native_tools: bool = typer.Option(False, help="openai backend: send tools as OpenAI `tools` (server-side parsing)."),
    success_threshold: float = typer.Option(1.0, help="A rollout succeeds when its reward reaches this."),
    sft_below_valid: float = typer.Option(0.5, help="Decision: valid-output rate below this -> SFT first."),
    rl_min_pass_at_k: float = typer.Option(0.02, help="Decision: pass@k below this -> SFT first."),
    done_at_pass_at_1: float = typer.Option(0.9, help="Decision: pass@1 at or above this -> done."),
    price_in: float = typer.Option(0.0, help="Cost estimate: USD per 1M prompt tokens."),
    price_out: float = typer.Option(0.0, help="Cost estimate: USD per 1M completion tokens."),
) -> None:
    """Evaluate a policy on a published split: metrics with 95% CIs, failure buckets, the SFT/RL/done decision."""
    from flywheel.flows.config import EvalConfig
    from flywheel.flows.eval import run_eval
    from flywheel.schemas import Thresholds

    try:
        config = EvalConfig(
            dataset=str(dataset), split=split, out=str(out), model=model, backend=backend, base_url=base_url,
            samples=samples, limit=limit, seed=seed, batch_size=batch_size, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, max_steps=max_steps, concurrency=concurrency, native_tools=native_tools,
            success_threshold=success_threshold, price_in=price_in, price_out=price_out,
            thresholds=Thresholds(sft_below_valid=sft_below_valid, rl_min_pass_at_k=rl_min_pass_at_k,
                                  done_at_pass_at_1=done_at_pass_at_1))
        _check_output(out, "--out", folder_wanted=True)
        summary = _with_progress(lambda: run_eval(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(_one_line(exc))
    m = summary["metrics"]
    for name in dict.fromkeys(("valid_output_rate", "correct_tool_rate", "correct_args_rate", "unsafe_action_rate",
                               "pass@1", f"pass@{samples}", "mean_reward", "latency_p95_s")):
        v = m.get(name, {})
        if v.get("value") is not None:
            err.print(f"{name:>20} {v['value']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}]", highlight=False)
    b = summary["batches"]
    err.print(f"batches: {b['run']} run, {b['reused']} reused of {b['total']}", highlight=False)
    err.print(f"decision: {summary['decision'].upper()}: {summary['reason']}", highlight=False)
    typer.echo(summary["report"])


REGISTRY = typer.Option(Path("registry"), envvar="FLYWHEEL_REGISTRY", help="Registry folder ($FLYWHEEL_REGISTRY).")
registry_app = typer.Typer(no_args_is_help=True, help="The model registry: versions, aliases, lineage.")
app.add_typer(registry_app, name="registry")


@app.command()
def promote(
    baseline_eval: Path = typer.Option(..., help="`flywheel eval` OUT folder of the baseline."),
    candidate_eval: Path = typer.Option(..., help="`flywheel eval` OUT folder of the candidate (same tasks and seeds)."),
    version: str = typer.Option("candidate", help="Version id or alias to promote."),
    registry: Path = REGISTRY,
    override: str = typer.Option(None, help="Promote although the gate failed; the reason goes into the audit log."),
    unsafe_margin: float = typer.Option(0.0, help="Allowed rise of the unsafe-action rate."),
    invalid_margin: float = typer.Option(0.02, help="Allowed rise of the invalid-output rate."),
    latency_margin: float = typer.Option(0.25, help="Allowed relative rise of p95 latency."),
) -> None:
    """Gate the candidate against the baseline (paired bootstrap) and move production only if it passes."""
    from flywheel.flows.promote import load_evals, promote_model
    from flywheel.tasks.release.gate import GateConfig
    from flywheel.tasks.release.registry import Registry

    try:
        config = GateConfig(unsafe_margin=unsafe_margin, invalid_margin=invalid_margin, latency_margin=latency_margin)
        Registry(registry).version(version)  # an unknown --version and unusable evals fail before any flow run
        load_evals(str(baseline_eval), str(candidate_eval))
        summary = _in_api(lambda: promote_model(str(registry), version, str(baseline_eval), str(candidate_eval), config,
                                                override))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(_one_line(exc))
    lo, hi = summary["success_ci"]
    err.print(f"gate {'passed' if summary['passed'] else 'REJECTED'}: success {summary['success_delta']:+.3f} "
              f"[{lo:+.3f}, {hi:+.3f}]; report {summary['report']}", highlight=False)
    for failure in summary["failures"]:
        err.print(f"  failed: {failure}", highlight=False)
    if summary["event"] is None:
        fail(f"production not moved: the gate rejected {summary['version']} (--override REASON to force)")
    typer.echo(f"production -> {summary['version']}")


@app.command()
def train(
    dataset: Path = typer.Option(..., help="A published dataset version folder (OUT/NAME/VERSION)."),
    out: Path = typer.Option(..., help="Output folder: adapter/, checkpoints/, metrics.jsonl, train_log.json, eval/."),
    method: str = typer.Option("grpo", help="sft (reference answers) | grpo (verifier rewards)."),
    model: str = typer.Option(None, help="Base checkpoint, or a PEFT adapter to keep training (e.g. the SFT adapter); "
                                         "default: the embedded model."),
    skip_tasks: Path = typer.Option(None, help="per_task.parquet of `flywheel eval --split train --samples K`: "
                                               "tasks always or never solved are left out."),
    limit: int = typer.Option(None, help="Train on the first N train tasks (ordered by id)."),
    max_steps: int = typer.Option(20, help="Optimizer steps."),
    batch_size: int = typer.Option(8, help="SFT: rows per step; GRPO: completions per step (a multiple of "
                                           "--num-generations)."),
    learning_rate: float = typer.Option(1e-4, help="Learning rate."),
    lora_r: int = typer.Option(16, help="LoRA rank."),
    num_generations: int = typer.Option(8, help="GRPO: completions per prompt."),
    loss_type: str = typer.Option("dapo", help="GRPO loss: grpo | dapo | dr_grpo | gspo (sequence-level IS)."),
    beta: float = typer.Option(0.0, help="GRPO: KL coefficient."),
    max_completion_length: int = typer.Option(64, help="Max new tokens per completion (and in held-out checks)."),
    eval_interval: int = typer.Option(10, help="Held-out reward and success every N steps."),
    eval_limit: int = typer.Option(32, help="Held-out tasks in the periodic checks and the final eval."),
    save_steps: int = typer.Option(10, help="Checkpoint every N steps (a killed run resumes from the last one)."),
    seed: int = typer.Option(0, help="Training and rollout seed."),
    registry: Path = typer.Option(None, envvar="FLYWHEEL_REGISTRY", help="Register the adapter here as the candidate."),
    parent: str = typer.Option(None, help="Registry version the --model adapter came from (lineage)."),
) -> None:
    """Train a LoRA adapter with TRL (SFT or GRPO), evaluate it on held-out tasks, register it as the candidate."""
    from flywheel.flows.config import EvalConfig
    from flywheel.tasks.inference.models import resolve_model
    from flywheel.tasks.training.train import TrainConfig

    try:
        config = TrainConfig(dataset=str(dataset), out=str(out), method=method, model=model, limit=limit,
                             skip_tasks=str(skip_tasks) if skip_tasks else None, max_steps=max_steps,
                             batch_size=batch_size, learning_rate=learning_rate, lora_r=lora_r, lora_alpha=2 * lora_r,
                             num_generations=num_generations, loss_type=loss_type, beta=beta,
                             max_completion_length=max_completion_length, eval_interval=eval_interval,
                             eval_limit=eval_limit, save_steps=save_steps, seed=seed)
        resolve_model(model)  # a bad --model fails before any flow run starts
        if registry and parent:  # so does an unknown --parent (it would only fail at registration, after training)
            from flywheel.tasks.release.registry import Registry

            Registry(registry).version(parent)
        evaluation = EvalConfig(dataset=str(dataset), out=str(out / "eval"), limit=eval_limit, seed=seed,
                                max_tokens=max_completion_length)
        _check_output(out, "--out", folder_wanted=True)
        from flywheel.flows.train import train_policy  # TRL and the eval flow: imported once every check has passed

        summary = _in_api(lambda: train_policy(config, evaluation, str(registry) if registry else None, parent))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(_one_line(exc))
    success = summary["metrics"].get("success_rate") or {}
    err.print(f"trained {len(summary['history'])} steps in {summary['train_s']:.0f} s; held-out success "
              f"{success.get('value')} [{success.get('lo')}, {success.get('hi')}]; eval {summary['eval']}", highlight=False)
    if summary["version"]:
        err.print(f"registered {summary['version']} as candidate in {registry}", highlight=False)
    typer.echo(summary["adapter"])


@app.command("run")
def run_(
    out: Path = typer.Option(Path("flywheel-run"), help="Everything lands here: datasets/, eval-baseline/, sft/, grpo/, "
                                                         "registry/, summary.md, summary.json."),
    seed: int = typer.Option(0, help="Run seed: dataset rows, rollouts and training derive from it."),
    n: int = typer.Option(300, "--n", help="Dataset rows (train + held-out)."),
    eval_limit: int = typer.Option(48, help="Held-out tasks in every eval (the gate's sample)."),
    sft_steps: int = typer.Option(60, help="SFT steps (only when the baseline decision is SFT)."),
    grpo_steps: int = typer.Option(4, help="GRPO steps."),
    num_generations: int = typer.Option(8, help="GRPO completions per prompt."),
    max_tokens: int = typer.Option(64, help="Max new tokens per completion (training and eval)."),
    train_limit: int = typer.Option(None, help="Train on the first N train tasks only."),
    gpu_pool: str = typer.Option(None, help="Run training and promotion as deployments on this work pool "
                                            "(needs PREFECT_API_URL of a deploy/start.sh server)."),
    dask_address: str = typer.Option(None, help="Dask scheduler for the dataset stages."),
) -> None:
    """The whole loop on embedded defaults: dataset, baseline eval, SFT if needed, GRPO, eval, gate, promote."""
    from flywheel.flows.pipeline import RunConfig, run_pipeline

    try:
        config = RunConfig(out=str(out), seed=seed, n=n, eval_limit=eval_limit, sft_steps=sft_steps,
                           grpo_steps=grpo_steps, num_generations=num_generations, max_tokens=max_tokens,
                           train_limit=train_limit, gpu_pool=gpu_pool, dask_address=dask_address)
        summary = _with_progress(lambda: run_pipeline(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(_one_line(exc))
    err.print(f"dataset   {summary['dataset']}", highlight=False)
    for name, e in summary["evals"].items():
        err.print(f"eval      {name}: {e['report']}", highlight=False)
    for name, s in summary["stages"].items():
        err.print(f"{name:<9} adapter {s['adapter']} -> registry version {s['version']}", highlight=False)
    err.print(f"registry  {summary['registry']} (flywheel registry show production --registry ...)", highlight=False)
    typer.echo((out / "summary.md").read_text(encoding="utf-8"))
    if not summary["gate"]["passed"]:
        fail("the gate rejected the trained model: production was not moved (see the gate report above)")


@app.command()
def ingest(
    trajectories: Path = typer.Option(..., help="JSONL of production trajectories (OpenAI chat format)."),
    dataset: Path = typer.Option(..., help="Published dataset version to extend (OUT/NAME/VERSION)."),
    threshold: float = typer.Option(0.8, help="MinHash Jaccard at which a new task is a near duplicate."),
) -> None:
    """Re-score production trajectories, bucket the failures, add them as held-out regression tasks (new version)."""
    from flywheel.flows.ingest import IngestConfig, ingest_trajectories
    from flywheel.tasks.data.ingest import read_trajectories

    try:
        config = IngestConfig(trajectories=str(trajectories), dataset=str(dataset), threshold=threshold)
        read_trajectories(trajectories)  # a bad line is one line with its number, before any flow run starts
        summary = _in_api(lambda: ingest_trajectories(config))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(_one_line(exc))
    err.print(f"buckets   {json.dumps(summary['buckets'], sort_keys=True)}", highlight=False)
    err.print(f"report    {summary['report']}", highlight=False)
    err.print(f"added     {summary['added']} held-out regression tasks", highlight=False)
    typer.echo(summary["version_dir"])


@app.command()
def rollback(registry: Path = REGISTRY) -> None:
    """Move production back to the version it pointed to before the current promotion."""
    from flywheel.tasks.release.registry import Registry

    try:
        event = Registry(registry).rollback()
    except (ValueError, OSError) as exc:
        fail(_one_line(exc))
    typer.echo(f"production -> {event.version} (was {event.previous})")


@registry_app.command("list")
def registry_list(registry: Path = REGISTRY) -> None:
    """Versions, aliases and the audit log."""
    from flywheel.tasks.release.registry import Registry

    try:
        reg = Registry(registry)
        events, aliases = reg.events(), reg.aliases()
    except (ValueError, OSError) as exc:
        fail(_one_line(exc))
    for e in events:
        extra = f" override={e.override!r}" if e.override else ""
        typer.echo(f"{e.seq:>4} {e.at} {e.actor:<8} {e.action:<8} {e.version} {e.alias or ''}{extra}")
    typer.echo(" ".join(f"{k}={v}" for k, v in sorted(aliases.items())) or "(empty registry)")


def _ancestry(reg: Any, version: Any) -> list[dict[str, Any]]:
    """The chain of parent versions (e.g. GRPO <- SFT), each with its training method and eval report."""
    chain, seen = [], {version.id}
    while version.parent and version.parent not in seen:
        version = reg.version(version.parent)
        seen.add(version.id)
        report = reg.path(version) / version.eval_report if version.eval_report else None
        chain.append({"id": version.id, "name": version.name, "method": version.training.get("config", {}).get("method"),
                      "eval_report": str(report) if report else None, "dataset": version.dataset.get("version")})
    return chain


@registry_app.command("show")
def registry_show(ref: str = typer.Argument("production", help="Version id or alias."), registry: Path = REGISTRY) -> None:
    """A version's lineage as JSON: files and hashes, base model, dataset and seeds, verifiers, training, eval."""
    from flywheel.tasks.release.registry import Registry

    try:
        reg = Registry(registry)
        version = reg.version(ref)
    except (ValueError, OSError) as exc:
        fail(_one_line(exc))
    base = reg.path(version)
    lineage = {**version.model_dump(), "path": str(base), "adapter_path": str(base / version.adapter),
               "eval_report_path": str(base / version.eval_report) if version.eval_report else None,
               "aliases": [a for a, v in reg.aliases().items() if v == version.id],
               "files_intact": not reg.verify_files(version),
               "events": [e.model_dump() for e in reg.events() if e.version == version.id],
               "ancestry": _ancestry(reg, version)}
    typer.echo(json.dumps(lineage, indent=2))


@registry_app.command("export")
def registry_export(
    ref: str = typer.Argument("production", help="Version id or alias."),
    out: Path = typer.Option(..., help="Target folder (must not exist)."),
    merged: bool = typer.Option(False, help="Write one merged checkpoint (base + LoRA) instead of the adapter."),
    registry: Path = REGISTRY,
) -> None:
    """What a serving stack loads: the PEFT adapter folder (base model named inside), or a merged checkpoint."""
    from flywheel.tasks.inference.models import export_version
    from flywheel.tasks.release.registry import Registry

    try:
        reg = Registry(registry)
        version = reg.version(ref)
        if reg.verify_files(version):
            raise ValueError(f"{version.id}: files changed since registration: {reg.verify_files(version)}")
        export_version(reg.path(version) / version.adapter, out, merged)
    except (ValueError, OSError) as exc:
        fail(_one_line(exc))
    typer.echo(str(out))


@app.command()
def score(
    verifier: str = typer.Option(..., help="Verifier name, one of tool_call, math, cli, code, workplace, judge."),
    input: Path = typer.Option(..., "--input", help='JSONL: {"task": <Task JSON>, "completion": "<text>" or [messages]} '
                                                    "per line (workplace: the trajectory, replayed in a fresh session)."),
    output: Path = typer.Option(..., help="JSONL: each input line plus its \"verdict\"."),
    judge_url: str = JUDGE_URL,
    judge_model: str = JUDGE_MODEL,
) -> None:
    """Score completions with a verifier. Exit 2 if some lines were malformed (reported by line number)."""
    module = _verifier(verifier, judge_url, judge_model)
    _output_or_fail(output, "--output")
    out, bad, total = _score_lines(module, input)
    _write_jsonl_atomic(output, [orjson.dumps(r).decode() + "\n" for r in out])
    err.print(f"scored {len(out)} lines -> {output}", highlight=False, markup=False, soft_wrap=True)
    _report_bad(bad, total)


@app.command("profile-reward")
def profile_reward(
    verifier: str = typer.Option(..., help="Verifier name, one of tool_call, math, cli, code, workplace, judge."),
    input: Path = typer.Option(..., "--input", help='Rollouts JSONL: {"task": <Task JSON>, "completion": "<text>"} per line.'),
    report: Path = typer.Option(None, help="Markdown report path (default: INPUT with .profile.md)."),
    samples: int = typer.Option(3, help="Sample outputs shown per score band."),
    judge_url: str = JUDGE_URL,
    judge_model: str = JUDGE_MODEL,
) -> None:
    """Before training: score histogram, failure classes and sample outputs per score band (also as markdown)."""
    from rich.markdown import Markdown

    from flywheel.tasks.evaluation.profile import profile_markdown

    module = _verifier(verifier, judge_url, judge_model)
    target = report or input.with_suffix(".profile.md")
    _output_or_fail(target, "--report")
    scored, bad, total = _score_lines(module, input)
    text = profile_markdown(scored, verifier, samples)
    _write_jsonl_atomic(target, [text])
    Console().print(Markdown(text))
    err.print(f"report -> {target}", highlight=False, markup=False, soft_wrap=True)
    _report_bad(bad, total)


@app.command()
def dedupe(
    input: Path = typer.Option(..., "--input", help="JSONL file."),
    output: Path = typer.Option(..., help="JSONL: each row plus \"cluster_id\" and \"keep\"."),
    field: str = typer.Option(..., help="The text field to compare."),
    threshold: float = typer.Option(0.8, help="Jaccard threshold (0, 1]."),
    ngram: int = typer.Option(3, help="Shingle size."),
    unit: str = typer.Option("word", help="word | char"),
) -> None:
    """Near-duplicate detection (MinHash LSH) on any JSONL file; the first row of a cluster is kept."""
    from flywheel.tasks.data.dedupe import MAX_TEXT_CHARS, NearDupParams, near_duplicates

    try:
        params = NearDupParams(threshold=threshold, ngram=ngram, unit=unit)  # type: ignore[arg-type]
    except ValueError as exc:
        fail(f"--{_one_line(exc)}")
    _output_or_fail(output, "--output")
    rows = _read_jsonl(input)
    records, bad = [], []
    for lineno, line in rows:
        try:
            record = _parse_line(line)
            if not isinstance(record, dict) or not isinstance(record.get(field), str):
                raise ValueError(f"expected an object with a string field {field!r}")
            if len(record[field]) > MAX_TEXT_CHARS:  # bounds one row's shingles, whatever --ngram is
                raise ValueError(f"field {field!r} has {len(record[field]):,} characters; dedupe compares at most "
                                 f"{MAX_TEXT_CHARS:,}: shorten it or compare another field")
            records.append((lineno, record))
        except ValueError as exc:
            bad.append(f"{input}:{lineno}: {_one_line(exc)}")
    ids = [f"line-{lineno}" for lineno, _ in records]
    res = near_duplicates(ids, [r[field] for _, r in records], params)
    lines = [orjson.dumps({**r, "cluster_id": c, "keep": k}).decode() + "\n"  # strict JSON, like the input
             for (_, r), c, k in zip(records, res.cluster_id, res.keep)]
    _write_jsonl_atomic(output, lines)
    err.print(f"{len(records)} rows, {sum(res.keep)} kept, {len(records) - sum(res.keep)} near duplicates -> {output}",
              highlight=False, markup=False, soft_wrap=True)
    _report_bad(bad, len(rows))


@app.command()
def serve(
    model: str = typer.Option(None, help="Checkpoint folder (default: the embedded SmolLM2-135M-Instruct)."),
    name: str = typer.Option("flywheel-policy", help="Model name the server answers to."),
    host: str = typer.Option("127.0.0.1", help="Bind address."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port."),
) -> None:
    """Serve a local checkpoint over an OpenAI-compatible API (/v1/chat/completions)."""
    import uvicorn

    from flywheel.tasks.inference.hf import HFChatModel
    from flywheel.tasks.inference.serving import create_app

    try:
        app_ = create_app(HFChatModel(model), name)
    except (ValueError, RuntimeError, OSError) as exc:
        fail(_one_line(exc))
    err.print(f"serving {name} on http://{host}:{port}/v1", highlight=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@app.command("serve-env")
def serve_env(
    env: str = typer.Option("workplace", help="Environment to serve (workplace)."),
    host: str = typer.Option("127.0.0.1", help="Bind address."),
    port: int = typer.Option(8100, help="Port."),
    max_sessions: int = typer.Option(4096, min=1, help="Open sessions allowed at once (429 beyond)."),
    session_ttl: float = typer.Option(600.0, min=0.001, help="Seconds a session may sit untouched before it is dropped."),
    session_max_age: float = typer.Option(3600.0, min=0.001, help="Seconds after seeding when a session is dropped "
                                                                  "even if kept busy (404 expired)."),
    max_body_kb: int = typer.Option(256, min=1, help="Largest request body in KB (413 beyond)."),
    max_session_kb: int = typer.Option(256, min=1, help="Largest session in KB of memory: task, state and call log, "
                                                        "sized as JSON plus 96 bytes per value and key (413 for a "
                                                        "task over it; a call that would pass it is refused)."),
) -> None:
    """Serve an environment as a resources server: /seed_session, one endpoint per tool, /verify.

    Sessions hold at most --max-sessions x --max-session-kb of data: 4096 x 256 KB = 1 GiB by default."""
    import uvicorn

    from flywheel.verifiers.workplace_server import Limits, create_app

    if env != "workplace":
        fail(f"--env {env!r} has no resources server; serve-env serves: workplace")
    limits = Limits(max_sessions=max_sessions, session_ttl_s=session_ttl, session_max_age_s=session_max_age,
                    max_body_kb=max_body_kb, max_session_kb=max_session_kb)
    err.print(f"serving the {env} environment on http://{host}:{port} (docs at /docs)", highlight=False)
    uvicorn.run(create_app(limits), host=host, port=port, log_level="warning")


def main() -> None:
    app(prog_name="flywheel")


if __name__ == "__main__":
    sys.exit(main())
