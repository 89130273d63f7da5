"""GRPO's rollouts on vLLM (tasks/training/vllm_rollout.py): the merged weights sent to the engine, the engine
sampling the current step's policy, a GRPO run on it, and the bad options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import lora_adapter, need_vllm
from flywheel.schemas import Task
from flywheel.tasks.inference.models import adapter_base, export_version, load_causal_lm
from flywheel.tasks.inference.policy import Sampling, start_vllm
from flywheel.tasks.training.rollout import prompt
from flywheel.tasks.training.train import TrainConfig
from flywheel.tasks.training.vllm_rollout import VLLMPolicy, merged_weights


def _tasks(dataset: str, n: int) -> list[Task]:
    import polars as pl

    return [Task.model_validate_json(t) for t in pl.read_parquet(Path(dataset) / "train.parquet")["task"][:n]]


@pytest.mark.integration
def test_merged_weights_are_the_exported_merge_and_leave_the_model_untouched(tmp_path) -> None:
    import torch
    from safetensors.torch import load_file

    adapter = lora_adapter(tmp_path / "a", seed=3)
    model, _ = load_causal_lm(adapter)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    weights = merged_weights(model)
    merged = load_file(export_version(adapter, tmp_path / "m", merged=True) / "model.safetensors")
    base = load_file(adapter_base(adapter) / "model.safetensors")
    # the adapter trains q and v; k goes too, at its base weight: vLLM reloads its fused qkv layer whole
    assert set(weights) == {k for k in merged if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))}
    for name, weight in weights.items():
        torch.testing.assert_close(weight, merged[name], rtol=0, atol=1e-6)
        assert torch.equal(weight, base[name].float()) == name.endswith("k_proj.weight"), name
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items()), "the trained model was changed"
    # sent in a bf16 engine's dtype: exactly what the engine's own cast of the fp32 weights gives, in half the bytes
    halves = merged_weights(model, "bfloat16")
    assert all(halves[k].dtype == torch.bfloat16 and torch.equal(halves[k], w.to(torch.bfloat16))
               for k, w in weights.items())
    plain, _ = load_causal_lm(adapter_base(adapter))
    with pytest.raises(ValueError, match="no LoRA layer"):
        merged_weights(plain)


def test_bad_rollout_backend_options_fail_with_one_clear_line(tool_dataset, tmp_path, monkeypatch) -> None:
    common = {"dataset": tool_dataset, "out": str(tmp_path / "o"), "rollout_backend": "vllm"}
    with pytest.raises(ValueError, match="applies to GRPO only"):
        TrainConfig(method="sft", **common)
    with pytest.raises(ValueError, match="rollout_backend"):
        TrainConfig(**common | {"rollout_backend": "tpu"})
    monkeypatch.setenv("FLYWHEEL_VLLM_PYTHON", str(tmp_path / "missing" / "python"))
    if __import__("importlib").util.find_spec("vllm") is None:  # vLLM lives in .venv-vllm, not here
        with pytest.raises(ValueError, match="bash deploy/install.sh`"):
            TrainConfig(**common)


@pytest.mark.slow
@pytest.mark.vllm
def test_grpo_rollouts_on_vllm_sample_the_current_steps_weights(tool_dataset, workplace_dataset, tmp_path,
                                                                  monkeypatch) -> None:
    """The engine serves the base until the first sync, then exactly the merged policy (the same greedy ids as a fresh
    engine on the merged export: the prefix cache of the old weights is dropped); same seed, same samples; agent
    episodes on the same engine (``_check_episodes``); a GRPO run on it trains and logs its rollout time. Its
    reservation is 0.4 GiB of the memory node, less than the worker's own RSS (1.1 GiB), which vLLM's reading of the
    fraction counted against it: every start failed."""
    from flywheel.tasks.inference.hf import HFChatModel
    from flywheel.tasks.training.train import train

    need_vllm()
    meminfo = Path("/sys/devices/system/node/node0/meminfo")  # vLLM's node here: node 0, else all of RAM
    total = (int(meminfo.read_text().split("MemTotal:")[1].split()[0]) * 1024 if meminfo.is_file()
             else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    monkeypatch.setenv("FLYWHEEL_VLLM_ROLLOUT_MEMORY", f"{0.4 * 2**30 / total:.6f}")
    adapter = lora_adapter(tmp_path / "a", seed=3)
    model, tokenizer = load_causal_lm(adapter)
    hf = HFChatModel.wrap(model, tokenizer, Path("training"))
    prompts = hf.encode([prompt(t) for t in _tasks(tool_dataset, 4)])
    policy = VLLMPolicy(hf, model, adapter_base(adapter))
    try:
        assert policy.engine.weight_dtype in ("bfloat16", "float32")  # what the syncs are sent in
        before = policy.generate_ids(prompts, 0, temperature=0.0, max_new_tokens=24)
        policy.sync(0)
        served = policy.generate_ids(prompts, 0, temperature=0.0, max_new_tokens=24)
        sampled = [policy.generate_ids(prompts, 5, temperature=1.0, max_new_tokens=24) for _ in range(2)]
        # seeded sampling over more than 4,096 prompt tokens in one call (vLLM's chunked prefill failed on CPU)
        long = [[1] + list(range(100 + 7 * i, 300 + 7 * i)) for i in range(32)]
        assert len(policy.generate_ids(long, 9, temperature=1.0, max_new_tokens=4)) == 32
        _check_episodes(policy, _tasks(workplace_dataset, 3))  # the same engine: one start fewer (~30 s alone)
    finally:
        policy.close()
    assert served != before, "the synced weights must change what the engine writes"
    assert sampled[0] == sampled[1] and sampled[0] != served
    assert all(len(ids) == 24 or ids[-1] == tokenizer.eos_token_id for ids in served)  # the end token is kept
    engine = start_vllm(str(export_version(adapter, tmp_path / "m", merged=True)))
    try:
        assert engine.generate_ids(prompts, [0] * len(prompts), Sampling(0.0, 1.0, 24)) == served
    finally:
        engine.close()
    result = train(TrainConfig(dataset=tool_dataset, out=str(tmp_path / "grpo"), method="grpo", train_limit=4, steps=2,
                               batch_size=4, num_generations=2, refill=0, check_interval=1, eval_limit=1,
                               validation_tasks=3, max_tokens=16, save_steps=100, rollout_backend="vllm"))
    steps = [r for r in result["history"] if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2] and all(r["rollout_s"] > 0 for r in steps)
    # the validation checks ran on the rollouts' engine (synced to each check's weights), before the first step too
    checks = [r for r in result["history"] if "val_success" in r]
    assert [r["step"] for r in checks] == [0, 1, 2] and {r["check_backend"] for r in checks} == {"vllm"}
    assert (Path(result["adapter"]) / "adapter_model.safetensors").is_file()


def _check_episodes(policy: VLLMPolicy, tasks: list[Task]) -> None:
    """Multi-turn on vLLM: the episodes of a lockstep batch are sampled on the engine (each step's context as token
    ids), the same seed gives the same episodes from the same engine state (a sync: new weights, empty prefix cache),
    and each episode's first reply is the engine's sample for its row."""
    from flywheel.tasks.inference.protocol import batch_seed
    from flywheel.tasks.training.episodes import agent_prompt, token_episodes

    runs = []
    for _ in range(2):
        policy.synced = None  # as after an optimizer step: weights sent, prefix cache dropped
        policy.sync(0)
        runs.append(token_episodes(policy, tasks, 7, 1.0, 1.0, 24, 3))
    policy.synced = None
    policy.sync(0)
    first = policy.generate_ids(policy.encode([agent_prompt(t) for t in tasks]), batch_seed([7, 1]), 1.0, 1.0, 24)
    assert runs[0] == runs[1], "the same seed must give the same episodes"
    for episode, reply in zip(runs[0], first, strict=True):
        assert episode["completion_ids"][:len(reply)] == reply and episode["env_mask"][:len(reply)] == [1] * len(reply)
        assert len(episode["completion_ids"]) == len(episode["env_mask"]) and episode["episode"]["steps"] >= 1


@pytest.mark.slow
@pytest.mark.vllm
def test_agent_episodes_train_on_vllm(workplace_dataset, tmp_path) -> None:
    """Multi-turn GRPO on vLLM (the engine's episodes themselves: ``_check_episodes``, in the test above): a GRPO run
    on workplace trains on episodes sampled on its engine and logs their counts."""
    from flywheel.tasks.training.train import train

    need_vllm()
    result = train(TrainConfig(dataset=workplace_dataset, out=str(tmp_path / "grpo"), method="grpo", train_limit=2,
                               steps=2, batch_size=2, num_generations=2, refill=0, check_interval=0, eval_limit=1,
                               max_tokens=16, save_steps=100, rollout_backend="vllm"))
    steps = [r for r in result["history"] if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2] and all(r["rollout_s"] > 0 and r["episode_steps"] >= 1 for r in steps)
    assert (Path(result["adapter"]) / "adapter_model.safetensors").is_file()
