"""Training (`flywheel train`, tasks/train.py) with TRL, PEFT and the real embedded model: SFT then GRPO (GSPO
loss) with held-out checks in the log, resume after a SIGKILL, registration with lineage; config errors."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import lora_adapter
from flywheel.flows.cli import app
from flywheel.schemas import Task
from flywheel.tasks.data.validate import reference_completion
from flywheel.tasks.training.train import TrainConfig, checkpoint_complete, grpo_rows, last_checkpoint, sft_rows
from flywheel.tasks.training.train_log import trim_log
from flywheel.verifiers.envs import get_env

runner = CliRunner()


@pytest.fixture(scope="module")
def dataset(tool_dataset) -> str:
    return tool_dataset


def _tasks(dataset: str, n: int = 4) -> list[Task]:
    import polars as pl

    return [Task.model_validate_json(t) for t in pl.read_parquet(Path(dataset) / "train.parquet")["task"][:n]]


def test_rows_use_the_eval_prompt_and_the_reference_answer(dataset) -> None:
    tasks = _tasks(dataset)
    sft, grpo = sft_rows(tasks), grpo_rows(tasks)
    assert [r["completion"][0]["content"] for r in sft] == [reference_completion(t) for t in tasks]
    assert sft[0]["prompt"] == grpo[0]["prompt"] and sft[0]["prompt"][0]["role"] == "system"
    assert all(t.tools[0].name in r["prompt"][0]["content"] for t, r in zip(tasks, sft))
    assert Task.model_validate_json(grpo[1]["task"]) == tasks[1]


def test_the_env_reward_function_scores_and_logs_invalid_and_unsafe_shares(dataset) -> None:
    tasks = _tasks(dataset, 3)
    reward, logged = get_env("tool_call").reward_fn, []
    completions = [[{"role": "assistant", "content": reference_completion(tasks[0])}],
                   [{"role": "assistant", "content": "I think you want a meeting."}],
                   [{"role": "assistant", "content": reference_completion(tasks[2])}]]
    rows = grpo_rows(tasks)
    assert reward(completions, [r["task"] for r in rows], reward_kind=[r["reward_kind"] for r in rows],
                  log_metric=lambda name, value: logged.append((name, value))) == [1.0, -1.0, 1.0]
    assert reward.__name__ == "tool_call_reward"
    assert dict(logged) == {"train_invalid_rate": pytest.approx(1 / 3), "train_unsafe_rate": 0.0}


def test_trim_log_drops_steps_after_the_checkpoint_and_torn_lines(tmp_path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "lo')
    trim_log(log, 2)
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [1, 2]


def test_an_out_folder_belongs_to_one_training_config(dataset, tmp_path) -> None:
    from flywheel.tasks.training.outputs import claim as _claim

    _claim(tmp_path, TrainConfig(dataset=dataset, out=str(tmp_path), steps=4))
    _claim(tmp_path, TrainConfig(dataset=dataset, out=str(tmp_path), steps=4))  # the same run: resume is fine
    with pytest.raises(ValueError, match="other options"):
        _claim(tmp_path, TrainConfig(dataset=dataset, out=str(tmp_path), steps=5))
    saved = json.loads((tmp_path / "train_config.json").read_text())
    del saved["replay_focus"]  # saved before the option existed: it ran with what is now its default
    (tmp_path / "train_config.json").write_text(json.dumps(saved))
    _claim(tmp_path, TrainConfig(dataset=dataset, out=str(tmp_path), steps=4))
    # recorded under the options' old names (--max-steps, --max-completion-length): the same run
    old_names = {{"steps": "max_steps", "max_tokens": "max_completion_length"}.get(k, k): v for k, v in saved.items()}
    (tmp_path / "train_config.json").write_text(json.dumps(old_names))
    _claim(tmp_path, TrainConfig(dataset=dataset, out=str(tmp_path), steps=4))
    (tmp_path / "train_config.json").write_text(json.dumps({k: v for k, v in saved.items() if k != "steps"}))
    with pytest.raises(ValueError, match="other options"):  # a missing option whose value is not the default
        _claim(tmp_path, TrainConfig(dataset=dataset, out=str(tmp_path), steps=4))
    sft = tmp_path / "sft"  # SFT reads no GRPO option: a record that differs only there is the same SFT run
    _claim(sft, TrainConfig(dataset=dataset, out=str(sft), method="sft", reward="success", replay_rows=32))
    _claim(sft, TrainConfig(dataset=dataset, out=str(sft), method="sft"))
    with pytest.raises(ValueError, match="other options"):
        _claim(sft, TrainConfig(dataset=dataset, out=str(sft), method="sft", learning_rate=0.5))


def test_bad_train_options_fail_with_one_clear_line(dataset, tmp_path) -> None:
    cases = [(["--batch-size", "6", "--num-generations", "4"], "multiple of --num-generations"),
             (["--batch-size", "8", "--micro-batch", "3"], "--micro-batch (3) must divide --batch-size (8)"),
             (["--micro-batch", "0"], "--micro-batch"),
             (["--method", "dpo"], "--method"),
             (["--loss-type", "ppo"], "--loss-type"),
             (["--reward", "partial"], "--reward"),
             (["--scale-rewards", "std"], "--scale-rewards: Input should be 'group', 'batch' or 'none'"),
             (["--method", "sft", "--replay-weight", "1"], "--replay-weight applies to GRPO only"),
             (["--replay-weight", "-1"], "--replay-weight"),
             (["--replay-rows", "0"], "--replay-rows"),
             (["--replay-focus", "tool"], "--replay-focus: Input should be 'all' or 'tools'"),
             (["--replay-focus", "tools"], "give --replay-weight above 0 too"),
             (["--skip-tasks", str(tmp_path / "nope.parquet")], "flywheel eval --split train"),
             (["--model", str(tmp_path)], str(tmp_path)),
             (["--method", "sft", "--beta", "0.04"], "--beta is GRPO's KL coefficient"),
             (["--skip-tasks", str(tmp_path)], "is not a regular file")]
    for extra, needle in cases:
        result = runner.invoke(app, ["train", "--dataset", dataset, "--out", str(tmp_path / "o"), *extra])
        assert result.exit_code == 1 and needle in result.output, (extra, result.output)
    result = runner.invoke(app, ["train", "--dataset", str(tmp_path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "no manifest.json" in result.output
    with pytest.raises(ValueError, match="no train tasks left"):
        from flywheel.tasks.training.train import load_tasks

        per_task = tmp_path / "per_task.parquet"
        import polars as pl

        ids = pl.read_parquet(Path(dataset) / "train.parquet")["id"]
        pl.DataFrame({"task_id": ids, "mark": ["never"] * len(ids)}).write_parquet(per_task)
        load_tasks(TrainConfig(dataset=dataset, out=str(tmp_path), skip_tasks=str(per_task)), "train")
    # --train-on failures keeps the never-solved tasks too (a greedy curriculum marks its failures "never")
    marks = ["always", "never", "mixed"] * len(ids)
    pl.DataFrame({"task_id": ids, "mark": marks[:len(ids)]}).write_parquet(per_task)
    kept = {name: [t.id for t in load_tasks(TrainConfig(dataset=dataset, out=str(tmp_path), skip_tasks=str(per_task),
                                                        train_on=name), "train")] for name in ("mixed", "failures")}
    assert kept["mixed"] == sorted(i for i, m in zip(ids, marks) if m == "mixed")
    assert kept["failures"] == sorted(i for i, m in zip(ids, marks) if m != "always")


@pytest.mark.slow
def test_sft_then_grpo_log_heldout_checks_and_register_with_lineage(dataset, tmp_path, prefect_api) -> None:
    reg = tmp_path / "reg"
    common = ["--dataset", dataset, "--train-limit", "8", "--eval-limit", "4", "--max-tokens", "24",
              "--registry", str(reg)]
    sft = runner.invoke(app, ["train", "--out", str(tmp_path / "sft"), "--method", "sft", "--steps", "2",
                              "--batch-size", "2", "--check-interval", "1", *common])
    assert sft.exit_code == 0, sft.output
    rows = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("heldout_success" in r and r["loss"] > 0 for r in rows)
    sft_version = json.loads(runner.invoke(app, ["registry", "show", "candidate", "--registry", str(reg)]).output)
    grpo = runner.invoke(app, ["train", "--out", str(tmp_path / "grpo"), "--method", "grpo", "--loss-type", "gspo",
                               "--scale-rewards", "none", "--model", str(tmp_path / "sft" / "adapter"),
                               "--parent", sft_version["id"],
                               "--steps", "2", "--batch-size", "4", "--num-generations", "2",
                               "--check-interval", "1", "--validation-tasks", "2", "--refill", "1",
                               "--reward", "success",
                               *common])
    assert grpo.exit_code == 0, grpo.output
    rows = [json.loads(x) for x in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    start = rows[0]
    # checks on the 2 validation tasks (never the held-out ones), the start adapter's first (step 0); the best of
    # them is the adapter
    assert [r["step"] for r in rows] == [0, 1, 2] and all("val_success" in r and "heldout_reward" not in r
                                                          for r in rows)
    assert {r["check_backend"] for r in rows} == {"transformers"}  # rollouts in the trainer: so are the checks
    assert rows[0]["best"] is True and (tmp_path / "grpo" / "best.json").is_file() and "loss" not in rows[0]
    assert all(0 < r["val_margin"] < 1 and r["margin_s"] > 0 for r in rows)  # selection's tie-break (margins.py)
    rows = rows[1:]
    record = json.loads((tmp_path / "grpo" / "best.json").read_text())["bests"][-1]
    best = record["step"]
    assert record["margin"] == next(r["val_margin"] for r in [start, *rows] if r["step"] == best)
    assert (tmp_path / "grpo" / "adapter" / "adapter_model.safetensors").read_bytes() == \
        (tmp_path / "grpo" / f"best-{best}" / "adapter_model.safetensors").read_bytes()
    assert all("reward" in r and 0 <= r["train_invalid_rate"] <= 1 and r["step_time_s"] > 0 for r in rows)
    assert all(r["groups"] == 2 and 0 <= r["groups_dropped"] <= 2 for r in rows)  # online filtering: one redraw
    # success-or-nothing: each step's mean reward over its 4 completions is a multiple of 1/4
    assert all(r["reward"] * 4 == pytest.approx(round(r["reward"] * 4)) for r in rows)
    shown = json.loads(runner.invoke(app, ["registry", "show", "candidate", "--registry", str(reg)]).output)
    manifest = json.loads((Path(dataset) / "manifest.json").read_text())
    assert shown["parent"] == sft_version["id"] and shown["files_intact"]
    assert shown["dataset"]["content_hash"] == manifest["content_hash"]
    assert shown["dataset"]["seeds_hash"] == manifest["seeds_hash"] and shown["verifiers"]["tool_call"]
    assert shown["training"]["config"]["reward"] == "success"
    assert shown["training"]["config"]["scale_rewards"] == "none"
    assert shown["training"]["config"]["loss_type"] == "gspo" and shown["metrics"]["success_rate"]["value"] is not None
    log = json.loads((tmp_path / "grpo" / "train_log.json").read_text())
    assert log["base_model"] == str(tmp_path / "sft" / "adapter") and len(log["history"]) == 3
    if best == 0:  # every GRPO step read below the start on the validation slice: the start adapter is the result
        assert (tmp_path / "grpo" / "adapter" / "adapter_model.safetensors").read_bytes() == \
            (tmp_path / "sft" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert "trained 2 steps" in grpo.output
    assert log["selected_step"] == best and shown["training"]["selected_step"] == best


@pytest.mark.slow
def test_killed_training_resumes_from_its_last_checkpoint(dataset, tmp_path) -> None:
    out = tmp_path / "k"
    cmd = [sys.executable, "-m", "flywheel.flows.cli", "train", "--dataset", dataset, "--out", str(out),
           "--method", "sft", "--steps", "4", "--batch-size", "2", "--save-steps", "1", "--check-interval", "100",
           "--eval-limit", "2", "--max-tokens", "8", "--train-limit", "8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 400
    while not checkpoint_complete(out / "checkpoints" / "checkpoint-2") and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "adapter").exists() and not (out / "train_log.json").exists()
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    log = json.loads((out / "train_log.json").read_text())
    assert log["resumed_from"].endswith(("checkpoint-2", "checkpoint-3"))
    assert [r["step"] for r in log["history"]] == [1, 2, 3, 4]  # no step lost or logged twice
    mask = os.umask(0o022)
    os.umask(mask)
    weights = out / "adapter" / "adapter_model.safetensors"  # safetensors writes 0600: published per the umask
    assert stat.S_IMODE(weights.stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((out / "adapter").stat().st_mode) == 0o777 & ~mask


@pytest.mark.slow
def test_the_same_seed_and_data_give_byte_identical_adapters(dataset, tmp_path) -> None:
    """SFT then GRPO twice from scratch with the same seed: the adapters are byte-identical, although the process's
    random state differs before each run (the LoRA weights are initialised after seeding, not before). The SFT
    adapter is on every linear layer (--lora-targets all-linear), MLP included, and GRPO keeps training it."""
    import random

    import torch

    from flywheel.tasks.training.train import train

    def both(root: Path) -> list[bytes]:
        common = {"dataset": dataset, "train_limit": 4, "check_interval": 0, "eval_limit": 1, "max_tokens": 8,
                  "save_steps": 100}
        sft = train(TrainConfig(out=str(root / "sft"), method="sft", steps=2, batch_size=2,
                                lora_targets="all-linear", **common))
        targets = json.loads((Path(sft["adapter"]) / "adapter_config.json").read_text())["target_modules"]
        assert {"q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= set(targets)
        grpo = train(TrainConfig(out=str(root / "grpo"), method="grpo", model=sft["adapter"], steps=1,
                                 batch_size=2, num_generations=2, refill=1, replay_weight=0.5, replay_rows=2,
                                 **common))  # the replay's draws are seeded too
        assert "replay_nll" in grpo["history"][0]
        return [(Path(r["adapter"]) / "adapter_model.safetensors").read_bytes() for r in (sft, grpo)]

    torch.manual_seed(1)
    random.seed(1)
    first = both(tmp_path / "a")
    torch.rand(1000)  # another random state before the second run
    random.random()
    assert both(tmp_path / "b") == first


@pytest.mark.slow
def test_grpo_from_the_base_model_is_seeded_and_makes_no_reference_or_old_policy_pass(dataset, tmp_path,
                                                                                       monkeypatch) -> None:
    """GRPO straight from the base model (the baseline decision "RL"): TRL's GRPOTrainer creates the LoRA adapter
    itself, the path the issue warns may run before seeding. Twice, from other random states: byte-identical
    adapters. And a step's only log-prob pass is the one with gradients: beta 0 keeps no reference model, and one
    update per generation (steps_per_generation = the accumulation steps, our own rollouts, not TRL's vLLM) needs
    no old-policy pass (item 6: a TRL upgrade or a config change that brings either back fails here)."""
    import random

    import torch

    import flywheel.tasks.training.train as train_mod

    made, passes = [], []
    build = train_mod._trainer

    def watched(*args, **kwargs):
        trainer = build(*args, **kwargs)
        logps = trainer._get_per_token_logps_and_entropies

        def counted(*a, **k):
            passes.append(torch.is_grad_enabled())
            return logps(*a, **k)

        trainer._get_per_token_logps_and_entropies = counted
        made.append(trainer)
        return trainer

    monkeypatch.setattr(train_mod, "_trainer", watched)

    def grpo(root: Path) -> bytes:
        result = train_mod.train(TrainConfig(
            dataset=dataset, out=str(root), method="grpo", steps=1, batch_size=2, micro_batch=1,
            num_generations=2, refill=0, train_limit=4, check_interval=0, eval_limit=1, max_tokens=8,
            save_steps=100))
        return (Path(result["adapter"]) / "adapter_model.safetensors").read_bytes()

    torch.manual_seed(3)
    random.seed(3)
    first = grpo(tmp_path / "a")
    torch.rand(1000)
    random.random()
    assert grpo(tmp_path / "b") == first
    assert all(t.ref_model is None for t in made)
    assert passes == [True] * 4, passes  # 2 runs x 1 step x 2 accumulation passes, each with gradients


@pytest.mark.slow
def test_grpo_calls_the_env_own_reward_function_with_the_rollout_verdicts(dataset, tmp_path, monkeypatch) -> None:
    """One reward path: GRPO's reward is what the env declares as ``reward_fn`` (here an env whose reward function
    records its calls), called by TRL with the rollout's Verdict objects (no JSON round trip) and the run's reward
    shaping; the step's logged reward is the mean of what it returned."""
    import dataclasses

    import flywheel.tasks.training.train as train_mod
    from flywheel.schemas import Verdict

    spec, calls = get_env("tool_call"), []

    def recording_reward(completions, task, **kw):
        rewards = spec.reward_fn(completions, task, **kw)
        calls.append((kw, rewards))
        return rewards

    own = dataclasses.replace(spec, reward_fn=recording_reward)
    monkeypatch.setattr(train_mod, "get_env", lambda name: own if name == "tool_call" else get_env(name))
    train_mod.train(TrainConfig(dataset=dataset, out=str(tmp_path), method="grpo", steps=1, batch_size=4,
                                num_generations=4, refill=0, train_limit=4, check_interval=0, eval_limit=1,
                                max_tokens=8, save_steps=100, reward="success"))
    assert len(calls) == 1, "TRL called the env's reward function once for the step"
    kw, rewards = calls[0]
    assert len(kw["verdict"]) == 4 and all(isinstance(v, Verdict) for v in kw["verdict"])
    assert kw["reward_kind"] == ["success"] * 4 and set(rewards) <= {-1.0, 0.0, 1.0}
    step = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert step["reward"] == pytest.approx(sum(rewards) / 4) and "train_invalid_rate" in step


@pytest.mark.integration  # loads the embedded model
def test_the_fused_lm_head_scores_only_labelled_positions_with_the_same_loss(monkeypatch) -> None:
    """On CPU, TRL's fused LM head scored every position (prompt included) and masked the loss afterwards; after
    score_labelled_positions_only() it projects only the labelled positions, as on GPUs: the same loss, log-probs
    and entropies from far fewer rows."""
    import torch
    import trl.trainer.utils as trl_utils
    from trl.kernels import chunked_logprob
    from trl.trainer.utils import add_fused_lm_head

    from flywheel.tasks.inference.models import load_causal_lm, resolve_model
    from flywheel.tasks.training.train import score_labelled_positions_only

    # TRL's own choice, whatever an earlier train() in this process patched; restored after the test
    monkeypatch.setattr(trl_utils, "_use_triton", chunked_logprob._use_triton)
    rows: list[int] = []
    kernel = trl_utils._ChunkedLogProbFunction

    class Counting:
        @staticmethod
        def apply(hidden, *args):
            rows.append(hidden.shape[0])
            return kernel.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Counting)
    model, _ = load_causal_lm(resolve_model(None))
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(100, 40000, (2, 48), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :40] = -100  # the prompt: no loss
    labels[1, 44:] = -100  # padding at the end of row 1
    with torch.no_grad():
        every = model(input_ids=ids, labels=labels, fused_lm_head=True)
        score_labelled_positions_only()
        only = model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert rows == [2 * 47, int((labels[:, 1:] != -100).sum())] and rows[1] == 8 + 4
    assert torch.allclose(every.loss, only.loss, atol=1e-6)
    assert torch.allclose(every.log_probs, only.log_probs, atol=1e-5)
    assert torch.allclose(every.entropy, only.entropy, atol=1e-5)


@pytest.mark.slow
def test_grpo_with_a_kl_term_anchors_on_the_start_adapter_not_the_base(dataset, tmp_path) -> None:
    """beta > 0 from an adapter (SFT's, in the loop): the KL must measure drift from the start policy, not from the
    base model (the model with its adapter off, TRL's reference for a new adapter, which differs from the start's
    policy). TRL 1.16 keeps a frozen copy of a retrained adapter as "ref": at the first step the policy is the start
    policy, so the step's KL is 0. Guards the anchor across TRL upgrades; the copy is not saved with the trained
    adapter. The start is a random LoRA adapter (far from the base: a base reference would read a large KL), not a
    trained one: what it was trained on does not matter here."""
    from flywheel.tasks.training.train import train

    common = {"dataset": dataset, "train_limit": 4, "check_interval": 0, "eval_limit": 1, "max_tokens": 16,
              "save_steps": 100}
    adapter = lora_adapter(tmp_path / "start", seed=6)
    grpo = train(TrainConfig(out=str(tmp_path / "grpo"), method="grpo", model=str(adapter), steps=1,
                             batch_size=2, num_generations=2, refill=0, beta=0.5, **common | {"check_interval": 1},
                             validation_tasks=2))  # checkpoint selection too: the best checkpoint saved and installed
    start, step = grpo["history"]  # step 0: the start adapter's validation check, the first best
    assert step["kl"] == pytest.approx(0.0, abs=1e-6), "the reference is not the start policy"
    assert start["step"] == 0 and start["best"] is True
    for folder in (Path(grpo["adapter"]), *(tmp_path / "grpo").glob("best-*")):
        saved = sorted(p.name for p in folder.iterdir())
        assert "ref" not in saved and "adapter_model.safetensors" in saved, (folder, saved)


@pytest.mark.slow
def test_grpo_replay_trains_the_reference_answers_of_tasks_grpo_never_sees(dataset, tmp_path) -> None:
    """GRPO from the base model on 2 tasks with the success reward: every group's rewards are equal (all fail),
    so GRPO's own loss and gradient are 0 and only the replay moves the adapter (the step's loss is the replay NLL).
    Its rows come from every train task but the validation slice, and the reference answers of the tasks GRPO never
    trained on become likelier."""
    import torch

    from flywheel.tasks.inference.models import load_causal_lm, resolve_model
    from flywheel.tasks.training.replay import Replay, completion_nll, encode
    from flywheel.tasks.training.train import load_tasks, train

    config = TrainConfig(dataset=dataset, out=str(tmp_path / "grpo"), method="grpo", train_limit=2, validation_tasks=2,
                         steps=2, batch_size=4, num_generations=2, micro_batch=2, refill=0, reward="success",
                         learning_rate=1e-3, check_interval=0, eval_limit=1, max_tokens=8, save_steps=100,
                         replay_weight=1.0, replay_rows=4)
    grpo_tasks = {t.id for t in load_tasks(config, "train")}
    pool = load_tasks(config.model_copy(update={"train_limit": None}), "train")
    unseen = [t for t in pool if t.id not in grpo_tasks]
    validation = {t.id for t in load_tasks(config, "validation")}
    base, tokenizer = load_causal_lm(resolve_model(None))
    ids, mask = encode(tokenizer, unseen[0])
    assert tokenizer.decode([i for i, m in zip(ids, mask) if m]) == reference_completion(unseen[0]) + "<|im_end|>"
    replay = Replay(tokenizer, pool, seed=0, rows=4, weight=1.0)
    drawn = {t.id for step in range(1, 40) for t in replay.draw(step)}
    assert drawn - grpo_tasks and not drawn & validation
    assert replay.draw(5) == Replay(tokenizer, pool, seed=0, rows=4, weight=1.0).draw(5)  # seeded
    rows = [encode(tokenizer, t) for t in unseen[:3]]
    width = max(len(i) for i, _ in rows)
    batch = torch.tensor([i + [0] * (width - len(i)) for i, _ in rows])
    attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows])
    labels = torch.tensor([[t if m else -100 for t, m in zip(i, mk)] + [-100] * (width - len(i)) for i, mk in rows])
    with torch.no_grad():  # the LM head on the labelled positions only: the model's own loss
        assert float(completion_nll(base, batch, attention, labels)) == pytest.approx(
            float(base(input_ids=batch, attention_mask=attention, labels=labels).loss), rel=1e-4)

    result = train(config)
    for row in result["history"]:
        assert row["reward_std"] == 0 and row["loss"] == pytest.approx(row["replay_nll"], abs=1e-4), row
    tuned, _ = load_causal_lm(Path(result["adapter"]))
    with torch.no_grad():
        nll = [float(Replay(tokenizer, unseen[:12], seed=0, rows=12, weight=1.0).nll(m.eval(), 0, 1))
               for m in (base, tuned)]  # 12 of the ~60 unseen tasks (1.00 -> 0.64 here; all of them cost 38 s)
    assert nll[1] < nll[0] - 0.1, nll


def test_replay_focused_on_tools_replays_only_tasks_calling_a_tool_grpo_trains_on(dataset) -> None:
    from flywheel.tasks.training.replay import same_tools

    pool = _tasks(dataset, 200)
    tools = lambda t: {c.tool for c in t.reference.calls}  # noqa: E731
    trained = pool[:2]
    focused = same_tools(pool, trained)
    wanted = set().union(*map(tools, trained))
    assert focused and all(tools(t) & wanted for t in focused), "only tasks calling a tool GRPO's tasks call"
    assert {t.id for t in pool if tools(t) & wanted} == {t.id for t in focused}, "and every such task"
    assert len(focused) < len(pool), "the fixture's pool has other tools: the focus must drop them"
    no_calls = [t.model_copy(update={"reference": t.reference.model_copy(update={"calls": ()})}) for t in trained]
    with pytest.raises(ValueError, match="--replay-focus tools: no train task calls a tool"):
        same_tools(pool, no_calls)


def test_curriculum_both_keeps_the_greedy_failures_and_the_sampled_mixed_tasks(tmp_path) -> None:
    import polars as pl

    from flywheel.tasks.training.train import skip_ids, union_marks

    ids = ["a", "b", "c", "d", "e"]
    pl.DataFrame({"task_id": ids, "mark": ["never", "always", "always", "never", "always"]}).write_parquet(
        tmp_path / "greedy.parquet")
    pl.DataFrame({"task_id": ids[::-1], "mark": ["never", "always", "mixed", "mixed", "always"]}).write_parquet(
        tmp_path / "sampled.parquet")  # e, d, c, b, a
    out = union_marks(str(tmp_path / "greedy.parquet"), str(tmp_path / "sampled.parquet"), tmp_path / "u.parquet")
    marks = dict(pl.read_parquet(out).rows())
    # a: wrong greedily; b: mixed in samples; c: mixed, d: both; e: never sampled right but greedy gets it: skipped
    assert marks == {"a": "mixed", "b": "mixed", "c": "mixed", "d": "mixed", "e": "always"}
    assert skip_ids(str(out), "mixed") == skip_ids(str(out), "failures") == {"e"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["greedy.parquet", "sampled.parquet", "u.parquet"]
    pl.DataFrame({"task_id": ["a", "x"], "mark": ["never", "mixed"]}).write_parquet(tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="mark different tasks"):
        union_marks(str(tmp_path / "greedy.parquet"), str(tmp_path / "other.parquet"), tmp_path / "u.parquet")
    assert dict(pl.read_parquet(out).rows()) == marks, "a refused union leaves the earlier file as it was"


def test_a_checkpoint_killed_mid_save_is_not_resumed_from(tmp_path) -> None:
    """SIGKILL while transformers writes checkpoint-3's trainer_state.json (last, in place) leaves it empty or cut:
    the resume takes checkpoint-2, the latest complete one (resuming from checkpoint-3 crashed: a CI failure)."""
    for step, state in ((1, "{}"), (2, '{"global_step": 2}'), (3, '{"global_st'), (4, "")):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    (tmp_path / "checkpoint-5").mkdir()  # killed before its state file
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert last_checkpoint(tmp_path / "none") is None


def test_curriculum_balance_cuts_each_tool_to_its_rarest_side_of_a_decision(tmp_path) -> None:
    import polars as pl

    from flywheel.schemas.records import Reference, TaskMeta, ToolCall
    from flywheel.tasks.training.train import balance_marks, skip_ids

    def task(tool: str, n: int, **args: str) -> Task:
        calls = (ToolCall(tool=tool, args=args),) if tool else ()
        return Task(env="tool_call", messages=({"role": "user", "content": f"{tool} {n}"},),
                    reference=Reference(calls=calls, answer=None if tool else "4"), meta=TaskMeta(seed_id="s"))

    by_name = [task("crm.find_contact", i, name=f"n{i}") for i in range(4)]
    by_company = [task("crm.find_contact", 9, company="acme")]
    search = [task("email.search", i, query="q") for i in range(3)]  # one side: a tool with no decision keeps all
    plain, skipped = task("", 0), task("crm.find_contact", 10, company="initech")  # no call; not a pick
    tasks = by_name + by_company + search + [plain, skipped]
    marks = {t.id: "always" if t is skipped else "mixed" for t in tasks}
    pl.DataFrame({"task_id": list(marks)[::-1], "mark": list(marks.values())[::-1]}).write_parquet(tmp_path / "m.pq")
    out, dropped = balance_marks(str(tmp_path / "m.pq"), tasks, "mixed", tmp_path / "b.parquet")
    first_by_name = min(t.id for t in by_name)
    left = {t.id for t in tasks} - skip_ids(str(out), "mixed")
    assert left == {first_by_name, by_company[0].id, plain.id} | {t.id for t in search}
    assert dropped == 3 and skip_ids(str(out), "failures") == skip_ids(str(out), "mixed")
    assert sorted(pl.read_parquet(out)["task_id"]) == sorted(marks)  # every task still marked, none lost
    # a "never" pick counts only when GRPO trains on failures: under "mixed" it is no pick, so nothing to balance
    marks[by_company[0].id] = "never"
    pl.DataFrame({"task_id": list(marks), "mark": list(marks.values())}).write_parquet(tmp_path / "m.pq")
    assert balance_marks(str(tmp_path / "m.pq"), tasks, "mixed", tmp_path / "b.parquet")[1] == 0
    assert balance_marks(str(tmp_path / "m.pq"), tasks, "failures", tmp_path / "b.parquet")[1] == 3
