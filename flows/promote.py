"""The ``promote`` flow: gate a registered candidate against the baseline on the same held-out rollouts, keep
the gate report (registry + Prefect artifact), and move the production alias only when the gate passes or an
override names its reason.

Contract: ``promote_model(...)`` returns the gate summary and the event (None when nothing moved). Both evals must
come from ``flywheel eval`` on the same dataset content and split with the same rollouts (task, sample, seed):
:func:`load_evals` checks that (and that both folders read) and raises one-line ``GateError``s, so the CLI calls
it before the flow starts. The gate report is written before the alias moves, so a kill in between leaves
production where it was.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import polars as pl
from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import ValidationError

from flywheel.flows.results import PromoteResult
from flywheel.flows.runtime import link_artifacts
from flywheel.schemas import EvalReport
from flywheel.tasks.files import write_text_atomic
from flywheel.tasks.release.gate import KEY, GateConfig, GateError, gate, markdown, paired
from flywheel.tasks.release.registry import Registry
from flywheel.verifiers.common import one_line

ROLLOUT_COLUMNS = (*KEY, "tool", "success", "valid_output", "unsafe", "latency_s", "completion_tokens",
                   "steps")  # what the gate reads


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"
    return one_line(exc)


def _load_eval(folder: Path, flag: str) -> tuple[EvalReport, pl.DataFrame]:
    report, rollouts = folder / "report.json", folder / "rollouts.parquet"
    if not (report.is_file() and rollouts.is_file()):
        raise GateError(f"{flag} {folder} is not a finished eval "
                        "(needs report.json and rollouts.parquet from `flywheel eval`)")
    try:
        parsed = EvalReport.model_validate_json(report.read_bytes())  # bytes: non-UTF-8 is a validation error too
    except (ValidationError, OSError) as exc:
        raise GateError(f"{flag} {report} is not a `flywheel eval` report ({_why(exc)}); run `flywheel eval` "
                        "again") from None
    try:
        frame = pl.read_parquet(rollouts)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise GateError(f"{flag} {rollouts} is not a readable parquet file ({_why(exc)}); run `flywheel eval` "
                        "again") from None
    missing = [c for c in ROLLOUT_COLUMNS if c not in frame.columns]
    if missing:
        raise GateError(f"{flag} {rollouts} has no {', '.join(missing)} column(s): not rollouts of `flywheel eval`; "
                        "run it again")
    return parsed, frame


def load_evals(baseline_eval: str, candidate_eval: str) -> tuple[EvalReport, pl.DataFrame, EvalReport, pl.DataFrame]:
    """Both evals, read and checked comparable (same dataset content, split and rollouts), or one GateError."""
    base_report, base = _load_eval(Path(baseline_eval), "--baseline-eval")
    cand_report, cand = _load_eval(Path(candidate_eval), "--candidate-eval")
    if base_report.dataset.get("content_hash") != cand_report.dataset.get("content_hash") \
            or base_report.split != cand_report.split:
        raise GateError("the two evals used different datasets or splits: evaluate both on the same version and split")
    paired(base, cand)  # the same (task, sample, seed) rollouts, or the error says how many differ
    return base_report, base, cand_report, cand


def production_eval(reg: Registry) -> tuple[str, Path]:
    """The production version's id and the eval folder it was registered with (its report.json and
    rollouts.parquet, kept in the registry): a candidate is gated against what is deployed. GateError when there is
    none to use. Pass the id to ``promote_model(gated_against=...)``: production must not move meanwhile."""
    if "production" not in reg.aliases():
        raise GateError(f"no production version in {reg.root} yet: pass --baseline-eval, an eval of the base model on "
                        "the candidate's tasks (`flywheel eval --dataset D --out base`)")
    version = reg.version("production")
    folder = reg.path(version)
    if not (folder / "rollouts.parquet").is_file():
        raise GateError(f"production version {version.id} has no rollouts in the registry (registered without an "
                        "eval): pass --baseline-eval, an eval of it on the candidate's tasks")
    changed = [f for f in reg.verify_files(version) if not f.startswith("adapter/")]
    if changed:  # the gate would judge the candidate against figures nobody measured
        raise GateError(f"production version {version.id}: {', '.join(changed)} changed since registration: restore "
                        "the registry, or pass --baseline-eval, an eval of it on the candidate's tasks")
    return version.id, folder


@flow(name="promote", persist_result=True)
def promote_model(registry: str, ref: str, baseline_eval: str, candidate_eval: str, config: GateConfig,
                  override: str | None = None, capability: dict[str, tuple[str, str]] | None = None,
                  gated_against: str | None = None) -> PromoteResult:
    """``capability``: env -> (baseline eval, candidate eval) on envs the candidate was not trained on;
    ``gated_against``: the production version whose eval ``baseline_eval`` is (``production_eval``)."""
    reg = Registry(registry)
    version = reg.version(ref)
    base_report, base, _, cand = load_evals(baseline_eval, candidate_eval)
    others = {env: load_evals(b, c)[1::2] for env, (b, c) in (capability or {}).items()}
    result = gate(base, cand, config, others)
    names = {"baseline": f"{base_report.model['ref']} ({baseline_eval})",
             "candidate": f"{version.id} ({candidate_eval})"}
    text = markdown(result, names) + (f"\nOverride: {override}\n" if override and not result.passed else "")
    gates = Path(registry) / "gates"
    # unique per gate: two gates of one version in one second (one process) overwrote each other's report
    stem = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{version.id}-{uuid.uuid4().hex[:12]}"
    payload = {"version": version.id, "baseline_eval": baseline_eval, "candidate_eval": candidate_eval,
               "capability": capability or {},
               "config": config.model_dump(), "result": result.model_dump(), "override": override}
    write_text_atomic(gates / f"{stem}.json", json.dumps(payload, indent=2) + "\n")
    write_text_atomic(gates / f"{stem}.md", text)
    create_markdown_artifact(key="gate-report", markdown=text, description=f"promotion gate for {version.id}")
    link_artifacts("gate", {"report": gates / f"{stem}.md", "json": gates / f"{stem}.json"})
    gate_info = {"passed": result.passed, "success_delta": result.success_delta, "success_ci": list(result.success_ci),
                 "report": f"gates/{stem}.json"}
    event = reg.promote(version.id, gate_info, override, gated_against) \
        if result.passed or (override and override.strip()) else None
    return PromoteResult(version=version.id, passed=result.passed, failures=result.failures(),
                         success_delta=result.success_delta, success_ci=result.success_ci,
                         report=str(gates / f"{stem}.md"), event=event, checks=result.checks)
