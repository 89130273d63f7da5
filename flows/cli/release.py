"""Release commands: ``promote`` (the gate), ``rollback`` and ``registry list|show|export``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from flywheel.flows.cli.base import app, check_output, err, explain, fail, in_api, option
from flywheel.tasks.release.gate import GateConfig  # numpy and pydantic (polars only where the gate runs)

REGISTRY = typer.Option(Path("registry"), envvar="FLYWHEEL_REGISTRY", help="Registry folder ($FLYWHEEL_REGISTRY).")
registry_app = typer.Typer(no_args_is_help=True, help="The model registry: versions, aliases, lineage.")
app.add_typer(registry_app, name="registry")


@app.command()
def promote(
    baseline_eval: Path = typer.Option(None, help="`flywheel eval` OUT folder of the baseline; default: the current "
                                                  "production version's eval (kept in the registry), so a candidate "
                                                  "must beat what is deployed."),
    candidate_eval: Path = typer.Option(..., help="`flywheel eval` OUT folder of the candidate "
                                                  "(same tasks and seeds)."),
    version: str = typer.Option("candidate", help="Version id or alias to promote."),
    registry: Path = REGISTRY,
    override: str = typer.Option(None, help="Promote although the gate failed; the reason goes into the audit log."),
    unsafe_margin: float = option(GateConfig, "unsafe_margin"),
    invalid_margin: float = option(GateConfig, "invalid_margin"),
    cost_margin: float = option(GateConfig, "cost_margin"),
) -> None:
    """Gate the candidate against the baseline (paired bootstrap) and move production only if it passes."""
    from flywheel.flows.promote import check_candidate, load_evals, production_eval, promote_model, promote_result
    from flywheel.tasks.release.gate import GateError
    from flywheel.tasks.release.registry import Registry

    try:
        if override is not None and not override.strip():
            raise ValueError("--override needs a reason: it goes into the audit log")
        config = GateConfig(unsafe_margin=unsafe_margin, invalid_margin=invalid_margin, cost_margin=cost_margin)
        reg = Registry(registry)
        # resolved once: an alias moved by another command while this one runs must not swap the version gated
        gated = reg.version(version)  # an unknown --version and unusable evals fail before any flow run
        version = gated.id
        # where the gate report goes
        check_output(registry / "gates", "--registry", folder_wanted=True, registry_ok=True)
        gated_against = None
        if baseline_eval is None:
            gated_against, baseline_eval = production_eval(reg)
            try:
                candidate = load_evals(str(baseline_eval), str(candidate_eval), kept_baseline=True)[2]
            except GateError as exc:  # e.g. the candidate's dataset is a newer version (after `flywheel ingest`)
                raise GateError(f"{exc} (the baseline is production's own eval, {baseline_eval}: pass --baseline-"
                                "eval, an eval of the production model on the candidate's dataset)") from None
        else:
            candidate = load_evals(str(baseline_eval), str(candidate_eval))[2]
        check_candidate(reg, gated, candidate)
        # a rejected gate ends its flow run Failed with the summary as its data: read from the final state
        args: dict[str, Any] = {"registry": str(registry), "ref": version, "baseline_eval": str(baseline_eval),
                                "candidate_eval": str(candidate_eval), "config": config, "override": override,
                                "gated_against": gated_against}
        summary = in_api(lambda: promote_result(promote_model(**args, return_state=True)))
    except (ValueError, RuntimeError, OSError, ValidationError) as exc:
        fail(explain(exc))
    lo, hi = summary.success_ci
    err.print(f"gate {'passed' if summary.passed else 'REJECTED'}: success {summary.success_delta:+.3f} "
              f"[{lo:+.3f}, {hi:+.3f}]; report {summary.report}", highlight=False)
    for failure in summary.failures:
        err.print(f"  failed: {escape(' '.join(failure.split()))}", highlight=False)  # a tool name is data
    if summary.event is None:
        fail(f"production not moved: the gate rejected {summary.version} (--override REASON to force)")
    typer.echo(f"production -> {summary.version}")


@app.command()
def rollback(registry: Path = REGISTRY) -> None:
    """Move production back to the version it pointed to before the current promotion."""
    from flywheel.tasks.release.registry import Registry

    try:
        event = Registry(registry).rollback()
    except (ValueError, OSError) as exc:
        fail(explain(exc))
    typer.echo(f"production -> {event.version} (was {event.previous})")


@registry_app.command("list")
def registry_list(registry: Path = REGISTRY) -> None:
    """Versions, aliases and the audit log."""
    from flywheel.tasks.release.registry import Registry

    try:
        reg = Registry(registry)
        if not reg.exists():
            raise ValueError(f"no registry at {registry} (no events or versions folder): check --registry or "
                             "$FLYWHEEL_REGISTRY; `flywheel train` registers the first version")
        events, aliases = reg.events(), reg.aliases()
    except (ValueError, OSError) as exc:
        fail(explain(exc))
    for e in events:
        extra = f" override={e.override!r}" if e.override else ""
        typer.echo(f"{e.seq:>4} {e.at} {e.actor:<8} {e.action:<8} {e.version} {e.alias or ''}{extra}")
    typer.echo(" ".join(f"{k}={v}" for k, v in sorted(aliases.items())) or "(empty registry)")


@registry_app.command("show")
def registry_show(ref: str = typer.Argument("production", help="Version id or alias."),
                  registry: Path = REGISTRY) -> None:
    """A version's lineage as JSON: files and hashes, base model, dataset and seeds, verifiers, training, eval."""
    from flywheel.tasks.release.lineage import lineage
    from flywheel.tasks.release.registry import Registry

    try:
        reg = Registry(registry)
        shown = json.dumps(lineage(reg, reg.version(ref)), indent=2, allow_nan=False)
    except (ValueError, OSError) as exc:
        fail(explain(exc))
    typer.echo(shown)


@registry_app.command("export")
def registry_export(
    ref: str = typer.Argument("production", help="Version id or alias."),
    out: Path = typer.Option(..., help="Target folder (must not exist)."),
    merged: bool = typer.Option(False, help="Write one merged checkpoint (base + LoRA) instead of the adapter."),
    registry: Path = REGISTRY,
) -> None:
    """What a serving stack loads: the PEFT adapter folder (base model named inside), or a merged checkpoint."""
    from flywheel.tasks.files import check_destination
    from flywheel.tasks.inference.models import export_version
    from flywheel.tasks.release.registry import Registry

    try:
        reg = Registry(registry)
        version = reg.version(ref)
        if reg.verify_files(version):
            raise ValueError(f"{version.id}: files changed since registration: {reg.verify_files(version)}")
        check_destination(out, "--out")  # never a folder inside a registry or a published dataset version
        export_version(reg.path(version) / version.adapter, out, merged)
    except (ValueError, OSError) as exc:
        fail(explain(exc))
    typer.echo(str(out))

