"""The registry with a real PEFT adapter: immutable versions with hashes, append-only events, aliases, the gate
through `flywheel promote` (rejects an equal candidate, passes a better one, override with a reason), rollback,
lineage, and a killed promotion that leaves the registry as it was."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import eval_dir
from flywheel.flows.cli import app
from flywheel.tasks.inference.policy import Request, Sampling, TransformersBackend
from flywheel.tasks.release.registry import Registry, RegistryError

runner = CliRunner()
FIELDS = {"name": "tool_call-policy", "base_model": {"ref": "embedded", "hash": "b" * 64},
          "dataset": {"name": "tool_call", "version": "v-x", "content_hash": "c" * 64, "seeds_hash": "s" * 64},
          "verifiers": {"tool_call": "1.0.0"}, "training": {"method": "sft", "lr": 1e-4}}


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> list[Path]:
    """Two real LoRA adapters of the embedded model (different init seeds -> different files)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from flywheel.tasks.inference.models import embedded_checkpoint

    root = tmp_path_factory.mktemp("adapters")
    out = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(embedded_checkpoint())
        peft = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                init_lora_weights="gaussian"))
        peft.save_pretrained(root / f"a{seed}")
        out.append(root / f"a{seed}")
    return out





def test_register_is_immutable_hashed_and_moves_candidate(tmp_path, adapters) -> None:
    reg = Registry(tmp_path / "r")
    v1 = reg.register(adapters[0], FIELDS)
    assert v1.id.startswith("mv-") and reg.aliases() == {"candidate": v1.id} and not reg.verify_files(v1)
    assert reg.register(adapters[0], FIELDS).id == v1.id  # same files, same version; the event log grows
    v2 = reg.register(adapters[1], FIELDS)
    assert v2.id != v1.id and reg.aliases()["candidate"] == v2.id and len(reg.events()) == 3
    (reg.path(v1) / "adapter" / "adapter_config.json").write_text("{}")
    assert reg.verify_files(v1) == ["adapter/adapter_config.json"]
    with pytest.raises(RegistryError, match="not a PEFT adapter"):
        reg.register(tmp_path, FIELDS)
    with pytest.raises(RegistryError, match="no version or alias 'production'"):
        reg.version("production")


def test_gate_promote_override_rollback_and_lineage(tmp_path, adapters, catalog, prefect_api) -> None:
    reg_dir = tmp_path / "r"
    reg = Registry(reg_dir)
    base = eval_dir(tmp_path / "base", catalog, good_every=0)
    better = eval_dir(tmp_path / "better", catalog, good_every=2, adapter=adapters[0])
    equal = eval_dir(tmp_path / "equal", catalog, good_every=0, adapter=adapters[0])  # no better than the base model
    weaker = eval_dir(tmp_path / "weaker", catalog, good_every=0, adapter=adapters[1])
    v1 = reg.register(adapters[0], FIELDS, better / "report.json")  # its eval and rollouts are kept with it
    against_production = ["promote", "--registry", str(reg_dir), "--candidate-eval"]  # no --baseline-eval
    none_yet = runner.invoke(app, [*against_production, str(better)])
    assert none_yet.exit_code == 1 and "no production version" in none_yet.output
    assert "--baseline-eval" in none_yet.output
    args = ["promote", "--registry", str(reg_dir), "--baseline-eval", str(base)]
    same = runner.invoke(app, [*args, "--candidate-eval", str(equal)])
    assert same.exit_code == 1 and "REJECTED" in same.output and "production not moved" in same.output
    assert "production" not in reg.aliases()
    ok = runner.invoke(app, [*args, "--candidate-eval", str(better)])
    assert ok.exit_code == 0 and f"production -> {v1.id}" in ok.output, ok.output
    v2 = reg.register(adapters[1], FIELDS)
    # a candidate better than the base model but worse than production is gated against production: rejected
    worse = runner.invoke(app, [*against_production, str(weaker)])
    assert worse.exit_code == 1 and "production not moved" in worse.output and reg.aliases()["production"] == v1.id
    gate = next(g for g in (json.loads(p.read_text()) for p in (reg_dir / "gates").glob("*.json"))
                if g["version"] == v2.id)
    assert gate["baseline_eval"] == str(reg.path(v1))
    kept = reg.path(v1) / "rollouts.parquet"  # production's own rollouts, swapped for weaker ones: not used
    original = kept.read_bytes()
    shutil.copy2(base / "rollouts.parquet", kept)
    forged = runner.invoke(app, [*against_production, str(better)])
    assert forged.exit_code == 1 and "rollouts.parquet changed since registration" in forged.output
    assert reg.aliases()["production"] == v1.id
    kept.write_bytes(original)
    newer = tmp_path / "newer"  # an eval of a newer dataset version (e.g. after `flywheel ingest`)
    shutil.copytree(better, newer)
    report = json.loads((newer / "report.json").read_text())
    report["dataset"]["content_hash"] = "e" * 64
    (newer / "report.json").write_text(json.dumps(report))
    moved_on = runner.invoke(app, [*against_production, str(newer)])
    assert moved_on.exit_code == 1 and "the baseline is production's own eval" in moved_on.output
    assert "pass --baseline-eval" in moved_on.output and reg.aliases()["production"] == v1.id
    forced = runner.invoke(app, [*args, "--candidate-eval", str(weaker), "--override", "hotfix approved by on-call"])
    assert forced.exit_code == 0 and reg.aliases()["production"] == v2.id
    assert reg.events()[-1].override == "hotfix approved by on-call" and not reg.events()[-1].gate["passed"]
    back = runner.invoke(app, ["rollback", "--registry", str(reg_dir)])
    assert back.exit_code == 0 and reg.aliases()["production"] == v1.id
    again = runner.invoke(app, ["rollback", "--registry", str(reg_dir)])
    assert again.exit_code == 1 and "nothing to roll back to" in again.output
    shown = json.loads(runner.invoke(app, ["registry", "show", "production", "--registry", str(reg_dir)]).output)
    assert shown["id"] == v1.id and shown["dataset"]["seeds_hash"] and shown["verifiers"] == {"tool_call": "1.0.0"}
    assert shown["files_intact"] and Path(shown["adapter_path"], "adapter_config.json").is_file()
    assert len(list((reg_dir / "gates").glob("*.md"))) == 4
    listing = runner.invoke(app, ["registry", "list", "--registry", str(reg_dir)]).output
    assert "rollback" in listing and "hotfix approved" in listing


@pytest.mark.slow
def test_versions_and_exports_are_readable_per_the_umask_not_private(tmp_path, adapters) -> None:
    """safetensors writes 0600 and mkdtemp 0700: a version and an export get the modes of any new output, so a
    worker or server under another uid can load them."""
    private = tmp_path / "private"
    shutil.copytree(adapters[0], private)
    (private / "adapter_model.safetensors").chmod(0o600)
    private.chmod(0o700)
    old = os.umask(0o022)
    try:
        reg = Registry(tmp_path / "r")
        folder = reg.path(reg.register(private, FIELDS))
        export = runner.invoke(app, ["registry", "export", "candidate", "--registry", str(tmp_path / "r"),
                                     "--out", str(tmp_path / "x")])
    finally:
        os.umask(old)
    assert export.exit_code == 0, export.output
    for path in (folder, folder / "adapter", tmp_path / "x"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o755, path
    for path in (folder / "adapter" / "adapter_model.safetensors", tmp_path / "x" / "adapter_model.safetensors",
                 folder / "version.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


@pytest.mark.slow
def test_export_gives_what_a_serving_stack_loads(tmp_path, adapters) -> None:
    reg_dir = tmp_path / "r"
    v1 = Registry(reg_dir).register(adapters[0], FIELDS)
    for flag, marker in (([], "adapter_config.json"), (["--merged"], "config.json")):
        target = tmp_path / f"export{len(flag)}"
        done = runner.invoke(app, ["registry", "export", v1.id, "--registry", str(reg_dir), "--out", str(target),
                                   *flag])
        assert done.exit_code == 0 and (target / marker).is_file() and (target / "tokenizer_config.json").is_file()
    again = runner.invoke(app, ["registry", "export", v1.id, "--registry", str(reg_dir), "--out", str(target)])
    assert again.exit_code == 1 and "exists" in again.output
    reply = TransformersBackend(str(tmp_path / "export1")).generate([Request([{"role": "user", "content": "Hi"}])],
                                                                    Sampling(max_tokens=4))
    assert reply[0].completion_tokens > 0


@pytest.mark.slow
def test_a_killed_promotion_leaves_the_registry_as_it_was(tmp_path, adapters, catalog) -> None:
    reg_dir = tmp_path / "r"
    reg = Registry(reg_dir)
    reg.register(adapters[0], FIELDS)
    base = eval_dir(tmp_path / "base", catalog, good_every=0)
    better = eval_dir(tmp_path / "better", catalog, good_every=2, adapter=adapters[0])
    cmd = [sys.executable, "-m", "flywheel.flows.cli", "promote", "--registry", str(reg_dir),
           "--baseline-eval", str(base), "--candidate-eval", str(better)]
    t0 = time.perf_counter()
    probe = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    duration = time.perf_counter() - t0
    assert probe.returncode == 0, probe.stderr[-2000:]
    rollback = runner.invoke(app, ["rollback", "--registry", str(reg_dir)])
    assert rollback.exit_code == 1  # one promotion: nothing earlier
    for i in range(1, 5):  # kill at spread-out moments of a run
        before = [e.model_dump() for e in reg.events()]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(duration * i / 5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        after = [e.model_dump() for e in reg.events()]  # every event file parses: none is half-written
        assert after[:len(before)] == before and len(after) - len(before) in (0, 1)
        assert reg.aliases()["production"] == reg.aliases()["candidate"]
