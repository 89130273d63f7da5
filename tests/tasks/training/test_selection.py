"""Checkpoint selection (tasks/training/selection.py): the best adapter on the validation slice is kept and a
resumed run forgets a best from after its checkpoint; drift flags fire on reward up with validation down, on
completion length blowing up and on the output format drifting, and stay quiet on a healthy run."""

from __future__ import annotations

import json

import pytest
import torch

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


def test_the_best_validation_checkpoint_is_kept_and_installed(lora, tmp_path) -> None:
    best = Best(tmp_path)
    _bump(lora, 1.0)
    assert best.keep(2, {"val_success": 0.5, "val_reward": 0.6}, lora)
    _bump(lora, 2.0)
    assert not best.keep(4, {"val_success": 0.5, "val_reward": 0.6}, lora)  # a tie: the earlier one stays
    assert not best.keep(6, {"val_success": 0.25, "val_reward": 0.9}, lora)
    kept = (tmp_path / "best-adapter" / "adapter_model.safetensors").read_bytes()
    final = tmp_path / "final"
    lora.save_pretrained(str(final))  # the last step's weights (2.0)
    assert (final / "adapter_model.safetensors").read_bytes() != kept
    assert Best(tmp_path).install(final) == 2  # a new process (a resumed run) finds the record
    assert (final / "adapter_model.safetensors").read_bytes() == kept
    assert json.loads((tmp_path / "best.json").read_text())["step"] == 2
    resumed = Best(tmp_path)
    resumed.drop_after(1)  # resumed from checkpoint-1: the best of step 2 is not this run's any more
    assert resumed.install(final) is None and not (tmp_path / "best.json").exists()


def _rows(rewards, val_success, lengths=None, invalid=None):
    rows = []
    for i, r in enumerate(rewards):
        row = {"step": i + 1, "reward": r, "completions/mean_length": (lengths or [20] * len(rewards))[i],
               "train_invalid_rate": (invalid or [0.0] * len(rewards))[i]}
        if (i + 1) % 2 == 0:
            row |= {"val_success": val_success[i // 2], "val_invalid_rate": 0.0}
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
