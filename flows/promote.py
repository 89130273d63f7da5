"""The ``promote`` flow: gate a registered candidate against the baseline on the same held-out rollouts, keep
the gate report (registry + Prefect artifact), and move the production alias only when the gate passes or an
override names its reason.

Contract: ``promote_model(...)`` returns the gate summary and the event when production moved (passed, or an
override); a rejected gate ends the flow run Failed, the summary its data (:func:`promote_result` reads either),
so automations watching flow-run states see the rejection. Both evals must come from ``flywheel eval`` on the same
dataset content, the held-out split, the same rollouts (task, sample, seed), success threshold, backend, code
version, sampling settings (batch size, and the prefix cache where it can change a text, included) and verifier
versions; each report.json must name the sha256 of the rollouts.parquet beside it (only production's eval kept in
the registry, hash-checked there, may predate that), and the rollouts must be what ``flywheel eval`` writes (column
types, nulls, success = valid and reward >= threshold). :func:`load_evals` checks all that and raises one-line
``GateError``s, and :func:`check_candidate` that the candidate eval measured the registered version's weights on
the base it resolves to, so the CLI calls both before the flow starts (the flow checks again). The gate report is
written before the alias moves, so a kill in between leaves production where it was.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import polars as pl
from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed, State
from pydantic import ValidationError

from flywheel.flows.eval import base_identity
from flywheel.flows.results import PromoteResult
from flywheel.flows.runtime import link_artifacts
from flywheel.schemas import EvalReport
from flywheel.schemas.evaluation import MAX_REPORT_BYTES
from flywheel.schemas.registry import ModelVersion
from flywheel.tasks.data.publish import file_sha256
from flywheel.tasks.evaluation.rollouts import ROLLOUT_SCHEMA
from flywheel.tasks.files import read_regular, write_text_atomic
from flywheel.tasks.inference.models import fingerprints
from flywheel.tasks.release.gate import KEY, GateConfig, GateError, gate, markdown, paired, plain, task_deltas
from flywheel.tasks.release.registry import Registry
from flywheel.verifiers.common import one_line
from flywheel.verifiers.envs import get_env

ROLLOUT_COLUMNS = (*KEY, "tool", "success", "valid", "reward", "valid_output", "unsafe", "latency_s",
                   "completion_tokens", "steps")  # what the gate reads and the checks below
# sampling settings that change the rollouts, compared always. batch_size too: it is the rows decoded together
# (transformers: one left-padded generate call; vLLM: the batches grouped into one call), and other batch shapes
# round other ways: greedy texts part on near-ties across batch shapes (bench/results/throughput.md); nothing shows it
# output-neutral, so two evals of other batch sizes are not like for like
SAME_RUN = ("temperature", "top_p", "max_tokens", "max_steps", "batch_size")
ABSENT = object()  # a setting a report does not record (written by an older `flywheel eval`)
REFRESH = "run `flywheel eval` again"


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg'].removeprefix('Value error, ')}"
    return one_line(exc)


def _rules(threshold: float) -> list[tuple[str, pl.Expr]]:
    """How `flywheel eval` writes rollouts (``tasks.evaluation.metrics.outcome``), as (what, rows that break it)."""
    scored = pl.col("valid") & pl.col("reward").is_not_null()
    return [("task_id, sample, seed, tool, valid, latency_s, completion_tokens and steps are never null",
             pl.any_horizontal(pl.col(*KEY, "tool", "valid", "latency_s", "completion_tokens", "steps").is_null())),
            ("no two rows share (task_id, sample, seed)", pl.struct(KEY).is_duplicated()),
            ("latency_s is finite and >= 0, completion_tokens and steps >= 0",
             ~pl.col("latency_s").is_finite() | (pl.col("latency_s") < 0) | (pl.col("completion_tokens") < 0)
             | (pl.col("steps") < 0)),
            ("reward is finite or null", pl.col("reward").is_not_null() & ~pl.col("reward").is_finite()),
            ("success, valid_output and unsafe are null exactly where the verdict is not scored (valid false or "
             "reward null)", pl.any_horizontal(pl.col("success", "valid_output", "unsafe").is_null() == scored)),
            (f"success is (reward >= the report's success_threshold {threshold}) where scored",
             scored & (pl.col("success") != (pl.col("reward") >= threshold)))]


def _load_eval(folder: Path, flag: str, kept: bool = False) -> tuple[EvalReport, pl.DataFrame]:
    """One eval folder, checked; ``kept``: production's eval kept (and hash-checked) by the registry."""
    report, rollouts = folder / "report.json", folder / "rollouts.parquet"
    if not (report.is_file() and rollouts.is_file()):
        raise GateError(f"{flag} {folder} is not a finished eval "
                        "(needs report.json and rollouts.parquet from `flywheel eval`)")
    try:  # bytes: non-UTF-8 is a validation error too; bounded: a huge file is refused, not read
        parsed = EvalReport.model_validate_json(read_regular(report, MAX_REPORT_BYTES))
    except (ValueError, OSError) as exc:  # ValidationError is a ValueError
        raise GateError(f"{flag} {report} is not a `flywheel eval` report ({_why(exc)}); {REFRESH}") from None
    if parsed.rollouts_sha256 is None and not kept:
        raise GateError(f"{flag} {report} names no rollouts_sha256 (written by an older `flywheel eval`): {REFRESH}")
    if parsed.rollouts_sha256 is not None and file_sha256(rollouts) != parsed.rollouts_sha256:
        raise GateError(f"{flag} {rollouts} is not the file its report.json was written with (sha256 differs): "
                        f"{REFRESH}")
    try:
        schema = pl.read_parquet_schema(rollouts)
        missing = [c for c in ROLLOUT_COLUMNS if c not in schema]
        if missing:
            raise GateError(f"{flag} {rollouts} has no {', '.join(missing)} column(s): not rollouts of `flywheel "
                            "eval`; run it again")
        wrong = [f"{c} is {schema[c]}, not {ROLLOUT_SCHEMA[c]}" for c in ROLLOUT_COLUMNS
                 if schema[c] != ROLLOUT_SCHEMA[c]]
        if wrong:
            raise GateError(f"{flag} {rollouts}: {wrong[0]}: not rollouts of `flywheel eval`; {REFRESH}")
        frame = pl.read_parquet(rollouts, columns=list(ROLLOUT_COLUMNS))
        broken = [what for what, bad in _rules(parsed.success_threshold)
                  if frame.select(bad.fill_null(True).any()).item()]
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise GateError(f"{flag} {rollouts} is not a readable parquet file ({_why(exc)}); {REFRESH}") from None
    if broken:
        raise GateError(f"{flag} {rollouts} breaks a rule of `flywheel eval`'s rollouts ({broken[0]}): {REFRESH}")
    return parsed, frame


def _prefix_cache_matters(report: EvalReport) -> bool:
    """Whether --prefix-cache can change a rollout of this eval. Only the transformers backend reads it (vLLM caches
    prefixes itself, a served model is not ours to set). There, greedy texts of single-turn envs are byte-identical
    with and without it (tests/tasks/inference/test_prefix_cache.py: test_greedy_texts_are_byte_identical_...;
    bench/results/throughput.md), so a greedy single-turn eval does not count it; sampled texts and
    multi-turn episodes (an agent's cache kept from turn to turn) are not shown the same: there it counts, as it does
    when the dataset's env is not known."""
    if report.model["backend"] != "transformers":
        return False
    if report.sampling.get("temperature") != 0:
        return True
    env = report.dataset.get("env")
    try:
        return not isinstance(env, str) or get_env(env).multi_turn
    except ValueError:  # an env this code does not know: nothing shown
        return True


def _same_run(base: EvalReport, cand: EvalReport) -> None:
    """Both evals ran the same way: what decides a rollout's outcome is equal, or one GateError naming the field.
    A setting that neither report records (both written before it was) counts as equal; one that only one records
    is refused: that eval is run again."""
    if base.dataset.get("content_hash") != cand.dataset.get("content_hash") or base.split != cand.split:
        raise GateError("the two evals used different datasets or splits: evaluate both on the same version and split")
    if base.split != "heldout":
        raise GateError(f"the evals are of the {one_line(base.split, 40)} split: the gate judges held-out tasks only; "
                        "evaluate both with --split heldout")
    same = "evaluate both with the same settings"
    # the backend first: the others' relevance depends on it. Other backends are other kernels, dtypes and random
    # streams: the same seeds give other texts, greedy ones included (bench/results/throughput.md)
    fields = {"backend": (base.model["backend"], cand.model["backend"], "evaluate both with the same --backend"),
              "success_threshold": (base.success_threshold, cand.success_threshold, same),
              "verifiers": (base.verifiers, cand.verifiers, same),
              # the prompts, parsing and rollout loop are code too (verifier versions alone do not cover them)
              "code_version": (base.code_version, cand.code_version, "evaluate both with the same flywheel code")}
    keys = [*SAME_RUN, *(("prefix_cache",) if _prefix_cache_matters(base) else ()),
            *(("native_tools",) if base.model["backend"] == "openai" else ())]  # the tools' form in the request
    fields |= {f"sampling {k}": (base.sampling.get(k, ABSENT), cand.sampling.get(k, ABSENT), same) for k in keys}
    for name, (b, c, fix) in fields.items():
        if (b is ABSENT) != (c is ABSENT):
            side = "baseline" if b is ABSENT else "candidate"
            raise GateError(f"the {side} eval's report.json does not record {name} (written by an older `flywheel "
                            f"eval`) and the other's does: {REFRESH} for the {side}, so both record the same settings")
        if b != c:
            raise GateError(f"the two evals did not run the same way: {name} {one_line(str(b), 80)} (baseline) vs "
                            f"{one_line(str(c), 80)} (candidate): {fix}")


def load_evals(baseline_eval: str, candidate_eval: str, kept_baseline: bool = False, scored: bool = True
               ) -> tuple[EvalReport, pl.DataFrame, EvalReport, pl.DataFrame]:
    """Both evals, read and checked comparable (same dataset content, held-out split, settings and rollouts), or one
    GateError. ``kept_baseline``: the baseline is production's eval kept in the registry; ``scored``: require a task
    scored on both sides (the held-out success test needs one; a capability check does not)."""
    base_report, base = _load_eval(Path(baseline_eval), "--baseline-eval", kept_baseline)
    cand_report, cand = _load_eval(Path(candidate_eval), "--candidate-eval")
    _same_run(base_report, cand_report)
    frame = paired(base, cand)  # the same (task, sample, seed) rollouts, or the error says how many differ
    if scored:
        task_deltas(frame)
    return base_report, base, cand_report, cand


def check_candidate(reg: Registry, version: ModelVersion, report: EvalReport) -> None:
    """The candidate eval measured ``version``'s weights (the files that decide its outputs: GRPO's kept start
    adapter, SFT's weights saved again, matches SFT's eval) on the base it deploys on: the checkpoint the registered
    adapter resolves to now (``base_model_name_or_path``: absolute, relative to the adapter folder in the registry,
    or null: the embedded model), by its weights' fingerprint; or one GateError. (The version's ``base_model.hash``,
    recorded at training, is not what deploys: the resolved base is, so that is what the eval must have run on.)"""
    model, adapter = report.model, reg.path(version) / version.adapter
    ref = one_line(model["ref"], 80)
    if model.get("hash") is None:
        raise GateError(f"--candidate-eval was run by the {one_line(model['backend'], 40)} backend ({ref}), which "
                        f"cannot show which weights answered: evaluate {version.id}'s adapter locally (`flywheel eval "
                        f"--model {adapter}`)")
    changed = reg.verify_files(version)
    if changed:  # the files that would be deployed are not the ones registered
        raise GateError(f"version {version.id}: {', '.join(changed[:3])} changed since registration: restore the "
                        "registry")
    every, weights = fingerprints(adapter)
    if model.get("weights") != weights and model.get("hash") != every:
        raise GateError(f"--candidate-eval evaluated {ref}, not the weights of {version.id}: evaluate its adapter "
                        f"(`flywheel eval --model {adapter}`) or promote the version that eval measured")
    # the adapter's files do not name its base's weights: the same files on another base (a null or relative
    # base_model_name_or_path resolved elsewhere, a base folder rewritten since) are another model
    try:
        base = base_identity(adapter)
    except ValueError as exc:
        raise GateError(f"version {version.id}'s adapter has no base to deploy on ({_why(exc)}): register an adapter "
                        "whose base_model_name_or_path is an absolute path to its base checkpoint, or null for the "
                        "embedded model") from None
    if "base" not in model:
        raise GateError(f"--candidate-eval's report.json does not name the base model it ran {ref} on (written by "
                        f"an older `flywheel eval`): {REFRESH} (`flywheel eval --model {adapter}`)")
    ran = model["base"]
    if base is None or ran is None or ran["weights"] != base["weights"]:
        on = "no base" if ran is None else f"the base {one_line(ran['model_id'], 80)}"
        where = "no base" if base is None else f"{base['model_id']}"
        raise GateError(f"--candidate-eval ran {ref} on {on}, not on the base {version.id}'s adapter resolves to "
                        f"({where}; the weights differ): evaluate the registered adapter (`flywheel eval --model "
                        f"{adapter}`)")


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
                  gated_against: str | None = None) -> PromoteResult | State:
    """``capability``: env -> (baseline eval, candidate eval) on envs the candidate was not trained on;
    ``gated_against``: the production version whose eval ``baseline_eval`` is (``production_eval``). Returns the
    summary when production moved (passed, or overridden); a rejected gate ends the run Failed with the summary as
    its data (read it with ``promote_model(..., return_state=True)`` and :func:`promote_result`: calling the flow
    for its result raises then)."""
    reg = Registry(registry)
    version = reg.version(ref)
    kept = reg.path(reg.version(gated_against)) if gated_against is not None else None
    if kept is not None and Path(baseline_eval).resolve() != kept.resolve():  # (a deployment run's parameters)
        raise GateError(f"gated_against {gated_against} says the baseline is that version's own eval kept in the "
                        f"registry, but baseline_eval is {baseline_eval}: pass {kept} or no gated_against")
    base_report, base, cand_report, cand = load_evals(baseline_eval, candidate_eval, gated_against is not None)
    check_candidate(reg, version, cand_report)
    others = {env: load_evals(b, c, scored=False)[1::2] for env, (b, c) in (capability or {}).items()}
    result = gate(base, cand, config, others)
    names = {"baseline": f"{base_report.model['ref']} ({baseline_eval})",
             "candidate": f"{version.id} ({candidate_eval})"}
    text = markdown(result, names) + (f"\nOverride: {plain(override)}\n" if override and not result.passed else "")
    gates = Path(registry) / "gates"
    # unique per gate: two gates of one version in one second (one process) overwrote each other's report
    stem = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{version.id}-{uuid.uuid4().hex[:12]}"
    payload = {"version": version.id, "baseline_eval": baseline_eval, "candidate_eval": candidate_eval,
               "capability": capability or {},
               "config": config.model_dump(), "result": result.model_dump(), "override": override}
    write_text_atomic(gates / f"{stem}.json", json.dumps(payload, indent=2, allow_nan=False) + "\n")
    write_text_atomic(gates / f"{stem}.md", text)
    create_markdown_artifact(key="gate-report", markdown=text, description=f"promotion gate for {version.id}")
    link_artifacts("gate", {"report": gates / f"{stem}.md", "json": gates / f"{stem}.json"})
    gate_info = {"passed": result.passed, "success_delta": result.success_delta, "success_ci": list(result.success_ci),
                 "report": f"gates/{stem}.json"}
    event = reg.promote(version.id, gate_info, override, gated_against) \
        if result.passed or (override and override.strip()) else None
    summary = PromoteResult(version=version.id, passed=result.passed, failures=result.failures(),
                            success_delta=result.success_delta, success_ci=result.success_ci,
                            report=str(gates / f"{stem}.md"), event=event, checks=result.checks)
    if event is None:  # rejected, production not moved: a Failed run (automations watch states), with the summary
        failed = "; ".join(result.failures()[:3]) or "no check failed"
        return Failed(message=one_line(f"gate rejected {version.id}: production not moved ({failed}); report "
                                       f"{gates / f'{stem}.md'}", 1000), data=summary)
    return summary


def promote_result(state: State) -> PromoteResult:
    """The summary of a finished ``promote_model`` run (``return_state=True``): a passed or overridden gate ends
    Completed, a rejected one Failed with its summary as data; a run that raised (a GateError in the flow) raises
    that here. What the CLI and the pipeline read instead of calling the flow for its result, which raises on a
    rejection."""
    value = state.result(raise_on_failure=False)
    if isinstance(value, BaseException):
        raise value
    if not isinstance(value, PromoteResult):  # a run that crashed or was cancelled holds no summary
        raise RuntimeError(f"the promote run ended {state.type.value} without a gate summary: {state.message}")
    return value
