"""`flywheel train` and `flywheel run` write adapters, checkpoints, evals and registry versions: where they write is
checked before any flow starts. Before: `train --out REG/versions/V --model REG/versions/V/adapter` overwrote an
immutable registry version, `--registry DATASET_VERSION` registered into a published dataset, `run --out` was not
checked at all, and a damaged registry or an OUT of another run was found only after training."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_cli_input import _invoke, _one_error, _tiny_dataset

from conftest import REGISTRY_FIELDS, fake_adapter
from flywheel.tasks.release.registry import Registry


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    """A published dataset, a registry with one version, a plain folder of other files."""
    reg = Registry(tmp_path / "reg")
    version = reg.register(fake_adapter(tmp_path / "adapters", 1), REGISTRY_FIELDS)
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    return {"dataset": _tiny_dataset(tmp_path / "ds", "tool_call"), "reg": reg.root,
            "version": reg.path(version), "other": other, "tmp": tmp_path}


def _train(paths: dict[str, Path], *args: str) -> str:
    code, output = _invoke("train", "--dataset", str(paths["dataset"]), "--steps", "1", "--eval-limit", "1",
                           *args)
    assert code == 1, output
    return _one_error(output)


def test_train_never_writes_into_a_registry_its_input_adapter_or_a_dataset(paths) -> None:
    version, reg, tmp = paths["version"], paths["reg"], paths["tmp"]
    before = {p: p.stat().st_mtime_ns for p in reg.rglob("*")}
    assert _train(paths, "--out", str(version), "--model", str(version / "adapter")) == (
        f"error: --out {version} is inside the model registry {reg.resolve()}: only registry commands write there "
        "(its versions are checked against their hashes); choose a path outside it")
    assert "is inside the model registry" in _train(paths, "--out", str(reg))
    own = tmp / "run1"
    fake_adapter(own, 0).rename(own / "adapter")  # a PEFT-shaped folder: the adapter a first training made
    assert _train(paths, "--out", str(own), "--model", str(own / "adapter")) == (
        f"error: --out {own} holds the --model adapter {own / 'adapter'}: training writes OUT/adapter and would "
        "destroy its own input; choose another --out")
    assert "holds the --model adapter" in _train(paths, "--out", str(own / "adapter"), "--model", str(own / "adapter"))
    assert "is inside the published dataset version" in _train(
        paths, "--out", str(tmp / "o"), "--registry", str(paths["dataset"] / "registry"))
    assert {p: p.stat().st_mtime_ns for p in reg.rglob("*")} == before
    assert sorted(p.name for p in paths["dataset"].iterdir()) == ["heldout.parquet", "manifest.json",
                                                                  "rejected.parquet", "train.parquet"]


def test_train_refuses_an_unusable_registry_before_training(paths) -> None:
    tmp, reg = paths["tmp"], paths["reg"]
    (tmp / "file").write_text("x")
    assert _train(paths, "--out", str(tmp / "o"), "--registry", str(tmp / "file")) == (
        f"error: --registry {tmp / 'file'} is a file; name a folder")
    assert _train(paths, "--out", str(tmp / "o"), "--registry", str(paths["other"])) == (
        f"error: --registry {paths['other']} is a folder of other files, not a model registry: name an existing "
        "registry or a new folder")
    assert _train(paths, "--out", str(tmp / "new" / "o"), "--registry", str(tmp / "new")) == (
        f"error: --out {tmp / 'new' / 'o'} is inside --registry {tmp / 'new'}: a registry holds registered versions "
        "only; choose an --out outside it")
    assert _train(paths, "--out", str(tmp / "o"), "--registry", str(tmp / "o" / "adapter")) == (
        f"error: --registry {tmp / 'o' / 'adapter'} is inside --out {tmp / 'o'}: training writes and replaces folders "
        "there; choose a registry outside OUT")  # before: OUT/adapter, the registry, was rmtree'd after training
    assert _train(paths, "--out", str(tmp / "o"), "--parent", "mv-0123456789ab") == (
        "error: --parent mv-0123456789ab names a registry version: pass --registry too")
    (reg / "events" / "000001.json").write_text("garbage")
    assert "000001.json" in _train(paths, "--out", str(tmp / "o"), "--registry", str(reg))  # without --parent too
    assert not (tmp / "o").exists()


def test_an_out_of_another_training_run_is_refused_before_training(paths) -> None:
    out = paths["tmp"] / "o"
    out.mkdir()
    (out / "train_config.json").write_text(json.dumps({"method": "sft", "max_steps": 999}))
    assert _train(paths, "--out", str(out)) == (f"error: {out} holds a training run with other options; rerun with "
                                                "the same options to resume it, or pass a new --out")
    (out / "train_config.json").unlink()
    os.mkfifo(out / "train_config.json")  # read as it was, it blocked for ever
    assert _train(paths, "--out", str(out)) == (f"error: {out / 'train_config.json'} is not a training run's config "
                                                "(not a regular file): pass a new --out")
    assert sorted(p.name for p in out.iterdir()) == ["train_config.json"]


def test_run_and_eval_outs_are_checked_before_the_run(paths) -> None:
    tmp = paths["tmp"]
    (tmp / "file").write_text("x")
    for args, message in (
            (["--out", str(tmp / "file")], f"--out {tmp / 'file'} is a file; name a folder"),
            (["--out", str(paths["dataset"] / "run")], "is inside the published dataset version"),
            (["--out", str(paths["version"])], "is inside the model registry")):
        code, output = _invoke("run", *args)
        assert code == 1 and message in _one_error(output), output
    code, output = _invoke("eval", "--dataset", str(paths["dataset"]), "--out", str(paths["reg"] / "eval"))
    assert code == 1 and "is inside the model registry" in _one_error(output), output
    code, output = _invoke("registry", "export", "candidate", "--registry", str(paths["reg"]), "--out",
                           str(paths["reg"] / "versions" / "exported"))
    assert code == 1 and "is inside the model registry" in _one_error(output), output
    assert not (paths["reg"] / "eval").exists() and not (paths["reg"] / "versions" / "exported").exists()


def test_a_deployment_run_gets_the_same_path_checks_as_the_cli(paths, prefect_api) -> None:
    """A Prefect deployment (the UI's Run, a schedule) calls the flow with JSON parameters and skips the CLI. Before:
    generate wrote a nested version and its cache into a published version, and train wrote train_config.json
    there, each "Completed" or failing only later."""
    from flywheel.flows.config import EvalConfig, GenerateConfig, RunConfig
    from flywheel.flows.generate import generate_dataset
    from flywheel.flows.pipeline import run_pipeline
    from flywheel.flows.train import train_policy
    from flywheel.tasks.training.train import TrainConfig

    dataset, version, tmp = paths["dataset"], paths["version"], paths["tmp"]
    before = sorted(p.name for p in dataset.iterdir())
    with pytest.raises(ValueError, match=f"--out {dataset} is inside the published dataset version {dataset}"):
        generate_dataset(GenerateConfig(env="tool_call", n=20, out=str(dataset)))
    with pytest.raises(ValueError, match="--cache-dir .* is inside the model registry"):
        generate_dataset(GenerateConfig(env="tool_call", n=20, out=str(tmp / "d"), cache_dir=str(version)))
    with pytest.raises(ValueError, match="is inside the model registry"):
        run_pipeline(RunConfig(out=str(paths["reg"])))
    with pytest.raises(ValueError, match="is inside the published dataset version"):
        train_policy(TrainConfig(dataset=str(dataset), out=str(dataset)))
    with pytest.raises(ValueError, match="is a folder of other files, not a model registry"):
        train_policy(TrainConfig(dataset=str(dataset), out=str(tmp / "o")), registry=str(paths["other"]))
    with pytest.raises(ValueError, match="evaluation must be of the trained dataset's held-out split"):
        train_policy(TrainConfig(dataset=str(dataset), out=str(tmp / "o")),
                     EvalConfig(dataset=str(dataset), out=str(tmp / "e"), split="train"))
    assert sorted(p.name for p in dataset.iterdir()) == before and not (tmp / "o").exists()
    assert not (tmp / "d").exists()


@pytest.mark.parametrize("made", ["versions", "events"])
def test_a_half_created_registry_is_a_registry_to_every_check(paths, made) -> None:
    """A first `register` killed after it made one of events/ and versions/ (Ctrl-C while copying the adapter left
    versions/ and its temp folder). Before: `tasks/files.py: registry_root` wanted both folders and `Registry.exists`
    events/ only, so outputs were let into such a folder and `--registry` at it was "a folder of other files" (or
    the reverse). Now one definition, `is_registry`: a half-made registry is a registry."""
    from flywheel.tasks.files import is_registry, registry_root
    from flywheel.tasks.training.train import check_train_paths

    tmp = paths["tmp"]
    half = tmp / "half"
    if made == "versions":
        (half / "versions" / ".tmp-k1ll3d" / "adapter").mkdir(parents=True)
    else:
        (half / "events").mkdir(parents=True)
    (half / ".lock").touch()
    assert is_registry(half) and Registry(half).exists() and registry_root(half / "o" / "x") == half.resolve()
    with pytest.raises(ValueError, match=f"--out {half / 'o'} is inside the model registry {half.resolve()}"):
        check_train_paths(half / "o", tmp / "base", None, None)
    check_train_paths(tmp / "o", tmp / "base", half, None)  # usable as --registry: training registers into it
    with pytest.raises(ValueError, match="no version or alias 'mv-0123456789ab'"):
        check_train_paths(tmp / "o", tmp / "base", half, "mv-0123456789ab")
    version = Registry(half).register(fake_adapter(tmp / "adapters2", 2), REGISTRY_FIELDS)
    assert Registry(half).version("candidate") == version
    # a lone events/ or versions/ of other files is no registry: writing beside it stays allowed
    (paths["other"] / made).mkdir()
    (paths["other"] / made / "notes.txt").write_text("x")
    assert not is_registry(paths["other"]) and registry_root(paths["other"] / "o") is None
    # an empty lone folder without the registry's lock is no registry either: an empty ~/versions (or a /tmp/events
    # anyone may make) refused every output under its parent (review probe)
    (home := tmp / "home" / made).mkdir(parents=True)
    assert not is_registry(home.parent) and registry_root(home.parent / "projects" / "ds") is None
