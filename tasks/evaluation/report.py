"""The evaluation report as markdown with PNG plots (metric bars with 95% intervals, failure buckets, reward
histogram). Plots are drawn with matplotlib's Agg backend (no display); every file is written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from flywheel.schemas import EvalReport, Metric
from flywheel.tasks.files import open_output
from flywheel.verifiers.common import plain

if TYPE_CHECKING:  # matplotlib is imported only when plots are drawn
    from matplotlib.figure import Figure

PLOTTED = ("valid_output_rate", "correct_tool_rate", "correct_args_rate", "execution_success_rate",
           "unsafe_action_rate", "pass@1")
SHOWN = (*PLOTTED, "success_rate", "mean_reward", "verifier_error_rate", "latency_p50_s", "latency_p95_s",
         "prompt_tokens_mean", "completion_tokens_mean", "cost_usd_per_1k_rollouts")


def _save(fig: Figure, path: Path) -> None:
    with open_output(path) as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")


def plots(report: EvalReport, rollouts: pl.DataFrame, out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = {}
    names = [n for n in (*PLOTTED, f"pass@{report.samples}")
             if report.metrics.get(n) and report.metrics[n].value is not None]
    names = list(dict.fromkeys(names))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    values = [report.metrics[n].value or 0.0 for n in names]
    shown = [report.metrics[n] for n in names]
    errs = [[v - (v if m.lo is None else m.lo) for m, v in zip(shown, values)],
            [(v if m.hi is None else m.hi) - v for m, v in zip(shown, values)]]
    ax.bar(names, values, yerr=errs, capsize=4, color="#4c72b0")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("rate (95% bootstrap CI)")
    ax.set_title(f"{report.model['ref']} on {report.dataset['name']} {report.split}")
    ax.tick_params(axis="x", rotation=30)
    _save(fig, out / "metrics.png")
    files["metrics_plot"] = "metrics.png"
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.bar(list(report.failure_buckets), [b.count for b in report.failure_buckets.values()], color="#dd8452")
    ax.set_ylabel("rollouts")
    ax.set_title("failure buckets")
    ax.tick_params(axis="x", rotation=30)
    _save(fig, out / "failures.png")
    files["failures_plot"] = "failures.png"
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.hist(rollouts["reward"].drop_nulls().to_list(), bins=21, range=(-1.0, 1.0), color="#55a868")
    ax.set_xlabel("reward")
    ax.set_ylabel("rollouts")
    ax.set_title("reward histogram")
    _save(fig, out / "rewards.png")
    files["rewards_plot"] = "rewards.png"
    plt.close("all")
    return files


def _fmt(m: Metric | None) -> str:
    if m is None or m.value is None:
        return "n/a"
    ci = f" [{m.lo:.3f}, {m.hi:.3f}]" if m.lo is not None and m.hi is not None else ""
    return f"{m.value:.3f}{ci}"


def _table(groups: dict[str, dict[str, Metric]], names: tuple[str, ...]) -> list[str]:
    lines = ["| | n | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(names)]
    for key, metrics in groups.items():
        cells = [f"{metrics[n].value:.3f}" if metrics.get(n) and metrics[n].value is not None else "n/a"
                 for n in names]
        lines.append(f"| {key} | {metrics['success_rate'].n} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: EvalReport) -> str:
    r, k = report, report.samples
    lines = [
        f"# Evaluation: {plain(r.model['ref'])} ({plain(r.model['backend'])}) on {plain(r.dataset['name'])} "
        f"{plain(r.dataset['version'])} {plain(r.split)}",
        "", f"**Decision: {r.decision.action.upper()}**: {r.decision.reason}.", "",
        f"{r.n_tasks} tasks x {k} sample(s) = {r.n_rollouts} rollouts; seed {r.seed}; sampling {r.sampling}; "
        f"success = reward >= {r.success_threshold}; verifiers {r.verifiers}.", "",
        "| metric | value [95% CI] | n |", "|---|---|---:|"]
    for name in dict.fromkeys((*SHOWN, f"pass@{k}")):
        if name in r.metrics:
            lines.append(f"| {name} | {_fmt(r.metrics[name])} | {r.metrics[name].n} |")
    lines += ["", "![metrics](metrics.png)", "", "## Per environment", ""]
    per = ("success_rate", "valid_output_rate", "correct_tool_rate", "correct_args_rate", "unsafe_action_rate",
           "mean_reward")
    lines += _table(r.per_env, per) + ["", "## Per tool (or category)", ""] + _table(r.per_tool, per)
    lines += ["", "## Failure buckets", "", "![failures](failures.png)", "", "| bucket | rollouts | share | classes |",
              "|---|---:|---:|---|"]
    lines += [f"| {name} | {b.count} | {b.share:.3f} | {b.classes} |" for name, b in r.failure_buckets.items()]
    for name, b in r.failure_buckets.items():
        if b.examples:
            lines += ["", f"### {name}: examples", ""]
            for ex in b.examples:
                lines.append(f"- `{ex.task_id[:12]}` #{ex.sample}: prompt `{_inline(ex.prompt)}` -> "
                             f"`{_inline(ex.completion)}` ({_inline(ex.details)})")
    tp = r.task_pass
    lines += ["", "## Per-task pass rates", "",
              f"always solved {tp.always}, never solved {tp.never}, mixed {tp.mixed}; {tp.equal_rewards} tasks gave "
              f"every sample the same reward (GRPO learns nothing from them). Per task: `{r.files['per_task']}`.",
              "", "![rewards](rewards.png)", "",
              f"Dataset `{_inline(r.dataset['path'])}` (content {plain(r.dataset['content_hash'][:12])}), "
              f"model `{_inline(r.model['model_id'])}` "
              f"(hash {str(r.model.get('hash'))[:12]}), code {r.code_version}; batches {r.batches}."]
    lines += [f"Batches copied from `{_inline(folder)}` (the same weights, sampling and tasks): {n}."
              for folder, n in r.copied_from.items()]
    return "\n".join(lines) + "\n"


def _inline(text: str) -> str:
    return " ".join(text.split()).replace("`", "'")[:160]
