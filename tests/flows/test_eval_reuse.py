"""Rollouts an eval takes without running them: batches copied from an earlier eval (``EvalConfig.reuse``, settable
from a deployment run) and its own finished batches (a resumed run). Before: a reused folder's batch files were
copied if their columns and keys matched, so rewritten rewards passed into a new report (with a valid hash) and on
to the gate; a damaged own batch file crashed the flow. And the eval flow, run by a deployment, skipped the CLI's
checks: it wrote into published versions, read a tampered dataset, and deleted OUT/report.json before finding that
its model did not exist."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from test_cli_input import _tiny_dataset

from conftest import eval_dir
from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import pending_batches, verified_rollouts
from flywheel.tasks.data.seeds import seed_task
from flywheel.tasks.evaluation.rollouts import plan


def _batch(catalog, tmp_path: Path) -> tuple[Path, Path, list, list, list]:
    """An earlier eval of 4 tasks (one batch, its namesake in its batches/: the same key) and this eval's batch."""
    tools, seeds = catalog
    tasks = [seed_task(s, tools) for s in seeds if s.call][:4]
    source = eval_dir(tmp_path / "a", catalog, good_every=2, limit=4)
    path = tmp_path / "out" / "batches" / "00000-0123456789abcdef.parquet"
    path.parent.mkdir(parents=True)
    (source / "batches").mkdir()
    (source / "batches" / path.name).write_bytes(b"")
    return source, path, tasks, [t.reference.calls[0].tool for t in tasks], plan([t.id for t in tasks], 1, 0)


def test_reused_rollouts_are_copied_only_when_their_report_vouches_for_them(catalog, tmp_path) -> None:
    source, path, tasks, labels, batch = _batch(catalog, tmp_path)
    pending, copied = pending_batches([path], [batch], tasks, labels, (str(source),))
    assert (pending, copied) == ([], {str(source): 1})
    assert pl.read_parquet(path).equals(pl.read_parquet(source / "rollouts.parquet"))
    path.unlink()
    forged = pl.read_parquet(source / "rollouts.parquet").with_columns(pl.lit(True).alias("success"),
                                                                       pl.lit(1.0).alias("reward"))
    forged.write_parquet(source / "rollouts.parquet")  # every rollout a success; the report not re-stamped
    assert verified_rollouts(source) is None
    pending, copied = pending_batches([path], [batch], tasks, labels, (str(source),))
    assert len(pending) == 1 and copied == {} and not path.exists()  # the batch runs
    report = json.loads((source / "report.json").read_text())
    (source / "report.json").write_text(json.dumps({**report, "rollouts_sha256": None}))
    assert verified_rollouts(source) is None  # a report that names no rollouts vouches for none


def test_a_damaged_own_batch_runs_again_instead_of_crashing_the_eval(catalog, tmp_path) -> None:
    _, path, tasks, labels, batch = _batch(catalog, tmp_path)
    for damage in (b"not parquet", None):
        if damage is None:  # the right columns, other rows: a batch of another run left under this name
            pl.read_parquet(tmp_path / "a" / "rollouts.parquet").head(2).write_parquet(path)
        else:
            path.write_bytes(damage)
        pending, copied = pending_batches([path], [batch], tasks, labels, ())
        assert len(pending) == 1 and copied == {}


def test_the_eval_flow_refuses_what_the_cli_refuses_before_touching_out(tmp_path, prefect_api) -> None:
    from flywheel.flows.eval import eval_policy

    dataset = _tiny_dataset(tmp_path / "ds", "tool_call")
    with pytest.raises(ValueError, match=f"--out {dataset / 'e'} is inside the published dataset version"):
        eval_policy(EvalConfig(dataset=str(dataset), out=str(dataset / "e")))
    out = tmp_path / "e"
    out.mkdir()
    (out / "report.json").write_text("{}")  # an earlier run's: kept when this run cannot start
    with pytest.raises(ValueError, match="is not a local checkpoint folder"):
        eval_policy(EvalConfig(dataset=str(dataset), out=str(out), model=str(tmp_path / "nowhere")))
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]
    heldout = pl.read_parquet(dataset / "heldout.parquet")
    pl.concat([heldout, heldout.head(1)]).write_parquet(dataset / "heldout.parquet")  # a duplicated task
    with pytest.raises(ValueError, match="heldout.parquet does not match manifest.json"):
        eval_policy(EvalConfig(dataset=str(dataset), out=str(out)))
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]


@pytest.mark.parametrize("name", ["<img src=x onerror=alert(1)>", "a\n# Injected", "[click](https:evil)", "a b",
                                  "x" * 129, "..", ""])
def test_a_dataset_name_is_a_plain_folder_name(name: str) -> None:
    """Before: a name with HTML, markdown or a newline was a "folder name" and went raw into the UI's artifacts."""
    from flywheel.schemas.records import folder_name

    with pytest.raises(ValueError, match="is not a folder name: use letters, digits"):
        folder_name(name)
    assert folder_name("tool_call-v2.1") == "tool_call-v2.1"


def test_names_in_the_eval_report_cannot_rewrite_it(catalog, tmp_path) -> None:
    from flywheel.schemas import EvalReport
    from flywheel.tasks.evaluation.report import markdown

    folder = eval_dir(tmp_path / "a", catalog, good_every=2, limit=4)
    report = json.loads((folder / "report.json").read_text())
    report["model"]["ref"] = "m) ![x](https://evil.example/t.png) `\n# Injected heading <!--"
    text = markdown(EvalReport.model_validate(report))
    assert "\n# Injected" not in text and "![x]" not in text and "<!--" not in text
    assert text.count("\n# ") == 0 and text.startswith("# Evaluation: m) \\!\\[x\\](https://evil.example/t.png)")


def test_a_base_url_holding_a_password_is_refused_before_it_is_recorded(tmp_path) -> None:
    """Before: http://user:password@host/v1 went into the manifest's params and the eval report's model_id."""
    from test_cli_input import _invoke, _one_error

    dataset = _tiny_dataset(tmp_path / "ds", "tool_call")
    message = ("--base-url must not hold a user or password (it is written into manifests and reports): pass the key "
               "as $OPENAI_API_KEY")
    for args in (["eval", "--dataset", str(dataset), "--out", str(tmp_path / "e")],
                 ["generate", "--env", "tool_call", "--n", "5", "--out", str(tmp_path / "g")]):
        code, output = _invoke(*args, "--backend", "openai", "--model", "m", "--base-url",
                               "http://user:s3cret@127.0.0.1:9/v1")
        assert code == 1 and message in _one_error(output) and "s3cret" not in output, output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


@pytest.mark.slow
def test_an_eval_leaves_only_its_own_batches_beside_its_report(tool_dataset, tmp_path) -> None:
    """Before: an eval of model X, then one of Y into the same OUT, left X's batch files beside Y's report, and an
    eval of X reusing that OUT copied Y's vouched-for rows under X's batch key."""
    from flywheel.flows.eval import run_eval

    out = tmp_path / "e"
    (out / "batches").mkdir(parents=True)
    stale = out / "batches" / "00000-ffffffffffffffff.parquet"  # another model's batch under its own key
    stale.write_bytes(b"x")
    run_eval(EvalConfig(dataset=tool_dataset, out=str(out), limit=2, batch_size=1, max_tokens=8, temperature=0.0,
                        backend="transformers", bootstrap=200))
    report = json.loads((out / "report.json").read_text())
    assert not stale.exists() and len(list((out / "batches").glob("*.parquet"))) == report["batches"]["total"] == 2
