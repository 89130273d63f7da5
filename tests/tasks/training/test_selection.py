"""Checkpoint selection (tasks/training/selection.py): the best adapter on the validation slice is kept and a
resumed run forgets a best from after its checkpoint; drift flags fire on reward up with validation down, on
completion length blowing up and on the output format drifting, and stay quiet on a healthy run."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
import torch

from flywheel.tasks.files import _umask
from flywheel.tasks.training.selection import Best, drift_flags


@pytest.fixture
def lora():
    """A tiny real causal LM with a real LoRA adapter (random weights: only the files matter here)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    return get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules=["q_proj"], lora_dropout=0.0))


def _bump(model, value: float) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.fill_(value)


def _adapter(folder) -> bytes:
    return (folder / "adapter_model.safetensors").read_bytes()


def test_the_best_validation_checkpoint_is_kept_and_installed(lora, tmp_path) -> None:
    best = Best(tmp_path)
    _bump(lora, 1.0)
    assert best.keep(2, {"val_success": 0.5, "val_reward": 0.6}, lora)
    _bump(lora, 2.0)
    assert not best.keep(4, {"val_success": 0.5, "val_reward": 0.59}, lora)  # equal success, lower reward
    assert not best.keep(6, {"val_success": 0.25, "val_reward": 0.9}, lora)
    kept = _adapter(tmp_path / "best-2")
    assert stat.S_IMODE((tmp_path / "best-2").stat().st_mode) == 0o777 & ~_umask()  # not mkdtemp's 0700
    final = tmp_path / "final"
    lora.save_pretrained(str(final))  # the last step's weights (2.0)
    assert _adapter(final) != kept
    assert Best(tmp_path).install(final) == 2  # a new process (a resumed run) finds the record
    assert _adapter(final) == kept
    resumed = Best(tmp_path)
    resumed.drop_after(1)  # resumed from checkpoint-1: the best of step 2 is not this run's any more
    assert resumed.install(final) is None and Best(tmp_path).record is None and not (tmp_path / "best-2").exists()


def test_a_tie_goes_to_the_later_checkpoint(lora, tmp_path) -> None:
    """Equal validation success and reward: the later, more trained checkpoint is kept (validation cannot tell
    them apart; the gate's paired test against the SFT parent decides); the start adapter stays only when every
    later check reads below it."""
    best = Best(tmp_path)
    _bump(lora, 0.0)
    assert best.keep(0, {"val_success": 0.5, "val_reward": 0.6}, lora)
    _bump(lora, 3.0)
    assert best.keep(12, {"val_success": 0.5, "val_reward": 0.6}, lora)
    assert Best(tmp_path).record["step"] == 12 and _adapter(tmp_path / "best-12") != _adapter(tmp_path / "best-0")
    final = tmp_path / "final"
    lora.save_pretrained(str(final))
    assert Best(tmp_path).install(final) == 12 and _adapter(final) == _adapter(tmp_path / "best-12")


def test_the_kept_start_adapter_is_the_start_adapters_own_files(lora, tmp_path) -> None:
    """Every later check reads below step 0: the result is the start adapter's files, byte for byte (its tokenizer
    and config too; a file only the trainer's save wrote goes), so its eval is the start adapter's
    (``EvalConfig.reuse`` copies its batches); the trainer's card and arguments stay. Without ``start`` (training
    began from a fresh LoRA), or with a link in it (it could name any file), step 0's own save is installed."""
    from flywheel.tasks.inference.models import fingerprints

    start = tmp_path / "start"
    lora.save_pretrained(str(start))
    (start / "tokenizer_config.json").write_text('{"padding_side": "right"}')
    (start / "README.md").write_text("SFT's card\n")
    best = Best(tmp_path / "run")
    (tmp_path / "run").mkdir()
    assert best.keep(0, {"val_success": 0.5, "val_reward": 0.6}, lora)
    _bump(lora, 2.0)
    assert not best.keep(2, {"val_success": 0.25, "val_reward": 0.9}, lora)
    final = tmp_path / "final"
    lora.save_pretrained(str(final))  # the last step's weights, beside the trainer's own tokenizer and card
    (final / "tokenizer_config.json").write_text('{"padding_side": "left"}')
    (final / "special_tokens_map.json").write_text("{}")
    (final / "README.md").write_text("GRPO's card\n")
    plain = Path(shutil.copytree(final, tmp_path / "plain"))
    linked = Path(shutil.copytree(final, tmp_path / "linked"))
    assert best.install(final, start) == 0
    assert fingerprints(final)[1] == fingerprints(start)[1] and fingerprints(final)[0] != fingerprints(start)[0]
    assert not (final / "special_tokens_map.json").exists() and (final / "README.md").read_text() == "GRPO's card\n"
    (tmp_path / "secret").write_text("a private file")
    (start / "notes.txt").symlink_to(tmp_path / "secret")  # a link in the start folder could name any file
    assert best.install(linked, start) == 0 and not (linked / "notes.txt").exists()  # step 0's own save instead
    assert _adapter(linked) == _adapter(start) and (linked / "special_tokens_map.json").is_file()
    assert best.install(plain) == 0 and _adapter(plain) == _adapter(start)  # step 0's save of the same weights
    assert (plain / "tokenizer_config.json").read_text() == '{"padding_side": "left"}'


def test_a_success_tie_is_ranked_by_the_margin_score(lora, tmp_path) -> None:
    """Checks with a margin score (margins.py): it ranks equal validation success, whatever the reward says; success
    still comes first. A record written without one (an older run resumed) loses a success tie to a scored check."""
    best = Best(tmp_path)
    assert best.keep(0, {"val_success": 0.96, "val_reward": 0.99, "val_margin": 0.90}, lora)
    assert not best.keep(2, {"val_success": 0.96, "val_reward": 0.995, "val_margin": 0.89}, lora)
    assert best.keep(4, {"val_success": 0.96, "val_reward": 0.98, "val_margin": 0.91}, lora)
    assert not best.keep(6, {"val_success": 0.95, "val_reward": 1.0, "val_margin": 0.99}, lora)
    assert Best(tmp_path).record == {"step": 4, "success": 0.96, "reward": 0.98, "margin": 0.91}
    old = tmp_path / "old"
    old.mkdir()
    assert Best(old).keep(0, {"val_success": 0.5, "val_reward": 0.9}, lora)
    assert Best(old).keep(2, {"val_success": 0.5, "val_reward": 0.1, "val_margin": 0.5}, lora)


def test_a_resumed_run_falls_back_to_the_best_before_its_checkpoint(lora, tmp_path) -> None:
    """Bests at steps 2 and 6, killed before checkpoint 6 was saved: resumed from checkpoint 4, the best is step 2's
    again (as in the uninterrupted run at step 4), and a worse check at the redone step 6 does not displace it."""
    best = Best(tmp_path)
    _bump(lora, 1.0)
    assert best.keep(2, {"val_success": 0.75, "val_reward": 0.6}, lora)
    _bump(lora, 3.0)
    assert best.keep(6, {"val_success": 0.875, "val_reward": 0.7}, lora)
    step2 = _adapter(tmp_path / "best-2")
    resumed = Best(tmp_path)
    resumed.drop_after(4)
    assert resumed.record["step"] == 2 and not (tmp_path / "best-6").exists()
    _bump(lora, 4.0)
    assert not resumed.keep(6, {"val_success": 0.5, "val_reward": 0.9}, lora)  # this time step 6 checks worse
    final = tmp_path / "final"
    lora.save_pretrained(str(final))
    assert Best(tmp_path).install(final) == 2 and _adapter(final) == step2


def _rows(rewards, val_success, lengths=None, invalid=None, prefix="val"):
    rows = []
    for i, r in enumerate(rewards):
        row = {"step": i + 1, "reward": r, "completions/mean_length": (lengths or [20] * len(rewards))[i],
               "train_invalid_rate": (invalid or [0.0] * len(rewards))[i]}
        if (i + 1) % 2 == 0 and prefix:
            row |= {f"{prefix}_success": val_success[i // 2], f"{prefix}_invalid_rate": 0.0}
        rows.append(row)
    return rows


def test_drift_flags() -> None:
    healthy = _rows([0.1, 0.2, 0.3, 0.4], [0.3, 0.5])
    assert drift_flags(healthy) == [] and drift_flags(healthy[:3]) == []  # only at a check row
    hacked = drift_flags(_rows([0.1, 0.2, 0.6, 0.8], [0.5, 0.3]))
    assert [f["flag"] for f in hacked] == ["reward_up_validation_down"] and hacked[0]["step"] == 4
    longer = drift_flags(_rows([0.1, 0.2, 0.3, 0.4], [0.3, 0.5], lengths=[20, 22, 40, 64]))
    assert [f["flag"] for f in longer] == ["length_blowup"]
    drift = drift_flags(_rows([0.1, 0.2, 0.3, 0.4], [0.3, 0.5], invalid=[0.0, 0.0, 0.3, 0.5]))
    assert [f["flag"] for f in drift] == ["format_drift"]


def _with_start(rows, val_success, prefix="val"):
    """``rows`` after the start adapter's own check (step 0: validation only, no training metrics), as TrainLog
    writes them when selection is on."""
    return [{"step": 0, f"{prefix}_success": val_success, f"{prefix}_invalid_rate": 0.0, f"{prefix}_reward": 0.5},
            *rows]


def test_drift_flags_fire_after_the_start_check() -> None:
    """The default run's shape: a check at step 0, 4 steps, checks at 2 and 4. The step-0 row has no training
    reward, length or invalid rate: the first check after it compares the steps since (first half against second),
    and length and format compare training steps, never the check-only row."""
    hacked = drift_flags(_with_start(_rows([0.1, 0.6], [0.3]), 0.5))
    assert [f["flag"] for f in hacked] == ["reward_up_validation_down"] and hacked[0]["step"] == 2
    assert "0.100 -> 0.600" in hacked[0]["detail"] and "0.500 -> 0.300" in hacked[0]["detail"]
    assert drift_flags(_with_start(_rows([0.6, 0.1], [0.3]), 0.5)) == []  # reward fell too: no hacking
    assert drift_flags(_with_start(_rows([0.1, 0.6], [0.5]), 0.5)) == []  # validation held
    one = {"step": 1, "reward": 0.9, "completions/mean_length": 20, "train_invalid_rate": 0.0, "val_success": 0.3}
    assert drift_flags(_with_start([one], 0.5)) == []  # a check every step: one step since the start, no halves
    longer = drift_flags(_with_start(_rows([0.1, 0.2, 0.3, 0.4], [0.5, 0.5], lengths=[20, 22, 40, 64]), 0.5))
    assert [f["flag"] for f in longer] == ["length_blowup"] and "20.0 -> 64.0" in longer[0]["detail"]
    drift = drift_flags(_with_start(_rows([0.1, 0.2, 0.3, 0.4], [0.5, 0.5], invalid=[0.0, 0.0, 0.3, 0.5]), 0.5))
    assert [f["flag"] for f in drift] == ["format_drift"] and "training 0.0 -> 0.5" in drift[0]["detail"]
    healthy = _with_start(_rows([0.1, 0.2, 0.3, 0.4], [0.5, 0.5]), 0.5)
    assert drift_flags(healthy) == [] and drift_flags(healthy, at_end=True) == []
    unchecked = _with_start(_rows([0.1, 0.2, 0.3, 0.4], [], lengths=[20, 22, 40, 64], prefix=None), 0.5, "heldout")
    assert [f["flag"] for f in drift_flags(unchecked, at_end=True)] == ["length_blowup"]


def test_length_and_format_drift_are_flagged_without_a_validation_slice() -> None:
    """Held-out checks (no validation slice) or no checks at all: length and format still flagged, at the check rows
    and at the last step; reward-up-validation-down needs the validation slice (the gate's tasks never steer)."""
    longer = _rows([0.1, 0.2, 0.3, 0.4], [0.3, 0.5], lengths=[20, 22, 40, 64], prefix="heldout")
    assert [f["flag"] for f in drift_flags(longer)] == ["length_blowup"]
    assert drift_flags(_rows([0.1, 0.2, 0.6, 0.8], [0.5, 0.3], prefix="heldout")) == []
    unchecked = _rows([0.1, 0.2, 0.3, 0.4], [], invalid=[0.0, 0.0, 0.3, 0.5], prefix=None)
    assert drift_flags(unchecked) == []  # not a check row, not the end
    assert [f["flag"] for f in drift_flags(unchecked, at_end=True)] == ["format_drift"]
    assert drift_flags(_rows([0.1, 0.2, 0.3, 0.4], [], prefix=None), at_end=True) == []  # healthy


@pytest.mark.parametrize("text", ["{not json", '{"bests": 3}', '{"other": []}', '{"bests": [{"step": "x"}]}',
                                  '{"bests": [{"step": 2, "success": "0.9", "reward": 0.9}]}',
                                  '{"bests": [{"step": 2, "success": 0.9, "reward": 0.9, "margin": "high"}]}',
                                  '{"bests": [{"step": 2, "success": 0.9, "reward": null}]}',
                                  '{"bests": [{"step": 2, "success": true, "reward": 0.9}]}',
                                  '{"bests": [{"step": 2, "reward": 0.9}]}'])
def test_a_hand_edited_best_record_is_one_clear_error(tmp_path, text) -> None:
    """Caught when the run starts, not at its first check minutes in (a score that is not a number)."""
    (tmp_path / "best-2").mkdir()
    (tmp_path / "best.json").write_text(text)
    with pytest.raises(ValueError, match="is not a checkpoint-selection record .* delete it"):
        Best(tmp_path)
