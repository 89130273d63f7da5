"""Training with TRL and a PEFT LoRA adapter: SFT on reference answers, GRPO against the env's reward function.

- ``sft_rows`` / ``grpo_rows``: published tasks as TRL's conversational rows (the eval's prompt rendering); GRPO rows
  carry the task JSON and the reward shaping, which the env's reward function (``EnvSpec.reward_fn``) reads.
- ``train(config)`` trains one adapter in ``OUT/checkpoints`` (resumed from the last complete checkpoint), saves it
  to ``OUT/adapter`` atomically and returns the log; ``OUT/metrics.jsonl`` gets one line per step (``train_log.py``).
- Multi-turn envs: SFT on gold episodes, GRPO on whole episodes in fresh sessions (``episodes.py``); replay
  (``replay.py``) adds an SFT loss on reference answers to each GRPO update; a KL term from an adapter anchors on it.
- CUDA and bf16 when a GPU is present; on CPU TRL's fused LM head scores only the labelled positions, as on GPUs.
- Reproducible: the same seed, data and config on CPU give a byte-identical adapter.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flywheel.schemas import Task
from flywheel.tasks.data.validate import reference_completion
from flywheel.tasks.files import write_text_atomic
from flywheel.tasks.training.config import AGENT_STEPS, LORA_TARGETS, TrainConfig, single_turn_envs
from flywheel.tasks.training.curriculum import balance_marks, decision_sides, skip_ids, union_marks
from flywheel.tasks.training.margins import margin_score, reference_margins
from flywheel.tasks.training.outputs import (
    check_claim,
    check_train_paths,
    checkpoint_complete,
    claim,
    last_checkpoint,
    save_adapter,
)
from flywheel.tasks.training.rewards import RewardKind
from flywheel.tasks.training.rollout import prompt
from flywheel.tasks.training.selection import Best
from flywheel.verifiers.envs import get_env

__all__ = ["TrainConfig", "balance_marks", "check_claim", "check_train_paths", "checkpoint_complete",
           "decision_sides", "grpo_rows", "last_checkpoint", "load_tasks", "sft_rows", "single_turn_envs",
           "skip_ids", "train", "union_marks"]


def sft_rows(tasks: list[Task]) -> list[dict[str, Any]]:
    return [{"prompt": prompt(t), "completion": [{"role": "assistant", "content": reference_completion(t)}]}
            for t in tasks]


def grpo_rows(tasks: list[Task], reward: RewardKind = "verifier", threshold: float = 1.0) -> list[dict[str, Any]]:
    """GRPO's dataset: the prompt, the task (JSON) and how the env's reward function shapes a verdict into the
    training reward (TRL passes every column to the reward functions)."""
    from flywheel.tasks.training.episodes import agent_prompt

    return [{"prompt": agent_prompt(t) if get_env(t.env).multi_turn else prompt(t), "task": t.model_dump_json(),
             "reward_kind": reward, "success_threshold": threshold} for t in tasks]


def load_tasks(config: TrainConfig, split: str) -> list[Task]:
    import polars as pl

    from flywheel.tasks.data.publish import read_split

    frame = read_split(Path(config.dataset), "heldout" if split == "heldout" else "train",
                       ["id", "task"]).sort("id")  # checked against the manifest
    if split != "heldout" and config.validation_tasks:  # the validation slice: the last N train tasks, never trained
        if frame.height <= config.validation_tasks:
            raise ValueError(f"--validation-tasks {config.validation_tasks} leaves no train task ({frame.height} in "
                             "the dataset)")
        keep = frame.height - config.validation_tasks
        frame = frame.tail(config.validation_tasks) if split == "validation" else frame.head(keep)
    if split == "train" and config.train_limit:  # the first N, then the skipped ones out: --skip-tasks of an eval with
        frame = frame.head(config.train_limit)  # the same --train-limit covers exactly these
    if split == "train" and config.skip_tasks:
        frame = frame.filter(~pl.col("id").is_in(list(skip_ids(config.skip_tasks, config.train_on))))
    if split == "heldout":
        frame = frame.head(config.eval_limit)
    if frame.height == 0:
        raise ValueError(f"no {split} tasks left to train on (check --skip-tasks and --train-limit)")
    tasks = [Task.model_validate_json(t) for t in frame["task"]]
    return tasks


def _rollout(config: TrainConfig, tokenizer: Any, tasks: list[Task], vllm_base: Path | None) -> tuple[Any, ...]:
    """GRPO's ``rollout_func`` and the counters it keeps (rollout seconds, filtered groups per step), or (None,):
    TRL's own generation (single-turn with --no-prefix-cache --refill 0)."""
    if config.method != "grpo":
        return (None,)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16
    if get_env(tasks[0].env).multi_turn:  # one completion is one whole episode in its own session
        from flywheel.tasks.training.episodes import make_episode_rollout

        return make_episode_rollout(tokenizer, tasks, config.seed, AGENT_STEPS, prefix_cache=config.prefix_cache,
                                    refill=config.refill, reward=config.reward, threshold=config.success_threshold,
                                    vllm_base=vllm_base)
    if config.prefix_cache or config.refill or vllm_base:  # one prefill per prompt, flat groups redrawn (rollout.py)
        from flywheel.tasks.training.rollout import make_rollout

        return make_rollout(tokenizer, tasks, config.seed, prefix_cache=config.prefix_cache, refill=config.refill,
                            reward=config.reward, threshold=config.success_threshold, vllm_base=vllm_base)
    return (None,)


def _trainer(config: TrainConfig, model: Any, tokenizer: Any, tasks: list[Task], common: dict[str, Any],
             callbacks: list[Any], rollout: Any = None, replay: Any = None) -> Any:
    from datasets import Dataset
    from peft import LoraConfig, PeftModel

    peft_config = None
    if isinstance(model, PeftModel):  # keep training the given adapter (e.g. GRPO after the SFT warm start)
        for name, param in model.named_parameters():
            param.requires_grad = "lora_" in name
    else:
        peft_config = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                                 task_type="CAUSAL_LM",
                                 target_modules=LORA_TARGETS[config.lora_targets])
    micro = config.micro_batch or config.batch_size  # rows per pass; the step accumulates batch_size / micro passes
    common = common | {"gradient_accumulation_steps": config.batch_size // micro}
    if config.method == "sft":
        from trl import SFTConfig, SFTTrainer

        from flywheel.tasks.training.episodes import sft_row

        args = SFTConfig(per_device_train_batch_size=micro, completion_only_loss=True, **common)
        # multi-turn: pre-tokenized episodes whose assistant_masks TRL turns into the labels
        rows = [sft_row(tokenizer, t) for t in tasks] if get_env(tasks[0].env).multi_turn else sft_rows(tasks)
        return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)
    from trl import GRPOConfig, GRPOTrainer

    gspo = config.loss_type == "gspo"  # TRL: GSPO is the grpo loss with sequence-level importance sampling
    # TRL generates once per optimizer step (steps_per_generation = the accumulation steps): the rollout sees the whole
    # batch, so its G copies of each prompt stay together and the groups' advantages use every completion
    args = GRPOConfig(per_device_train_batch_size=micro, num_generations=config.num_generations,
                      loss_type="grpo" if gspo else config.loss_type,
                      importance_sampling_level="sequence" if gspo else "token", beta=config.beta,
                      scale_rewards=config.scale_rewards,
                      max_completion_length=config.max_tokens, temperature=config.temperature, **common)
    if replay is not None:
        from flywheel.tasks.training.replay import replay_trainer

        GRPOTrainer = replay_trainer(GRPOTrainer, replay)  # noqa: N806 (TRL's trainer plus the replay loss)
    if config.prefix_cache:
        from flywheel.tasks.training.shared_prefix import shared_prefix_trainer

        GRPOTrainer = shared_prefix_trainer(GRPOTrainer)  # noqa: N806 (each pass's shared prompt prefix once)
    # the env's own reward function (EnvSpec.reward_fn), as TRL calls any reward function
    return GRPOTrainer(model=model, reward_funcs=[get_env(tasks[0].env).reward_fn], args=args,
                       train_dataset=Dataset.from_list(grpo_rows(tasks, config.reward, config.success_threshold)),
                       processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks, rollout_func=rollout)


def score_labelled_positions_only() -> None:
    """TRL 1.16's fused LM head (SFT loss, GRPO log-probs) scores every position of a sequence unless the device runs
    Triton, where it scores only the positions with a label (``trl/trainer/utils.py: add_fused_lm_head``: elsewhere
    a varying count of positions would recompile its tiles). In eager mode on CPU nothing recompiles, and the
    prompt's positions (every position outside the completion, for GRPO the prompt and padding) carry no loss: the
    LM head over a 49k vocabulary for them was a third of an SFT step here. Scoring the labelled ones only gives the
    same loss and log-probs (tests/tasks/training/test_train.py). The name patched is read only for that choice
    (the kernels read their own module's)."""
    import trl.trainer.utils as trl_utils

    setattr(trl_utils, "_use_triton", _always)  # noqa: B010 (a module's function replaced: read at each call)


def _always(device: Any) -> bool:
    return True


def train(config: TrainConfig, notify: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    import datasets
    import torch
    from transformers import PrinterCallback, set_seed
    from transformers.utils import logging as hf_logging

    from flywheel.tasks.inference.models import adapter_base, fingerprint, is_adapter, load_causal_lm, resolve_model
    from flywheel.tasks.training.train_log import TrainLog, heldout_metrics, trim_log

    hf_logging.disable_progress_bar()  # progress goes to metrics.jsonl and ``notify``, not to bars on stderr
    datasets.disable_progress_bars()

    out = Path(config.out)
    tasks, heldout = load_tasks(config, "train"), load_tasks(config, "heldout")
    out.mkdir(parents=True, exist_ok=True)
    claim(out, config)
    cuda = torch.cuda.is_available()
    base = resolve_model(config.model)
    model, tokenizer = load_causal_lm(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if cuda:
        model = model.to("cuda")
    resume = last_checkpoint(out / "checkpoints")
    trim_log(out / "metrics.jsonl", int(resume.rsplit("-", 1)[-1]) if resume else 0)

    checks = load_tasks(config, "validation") if config.validation_tasks else heldout  # the gate's tasks never select
    best = Best(out) if config.validation_tasks else None
    if best is not None:
        best.drop_after(int(resume.rsplit("-", 1)[-1]) if resume else 0)

    vllm_base = (adapter_base(base) if is_adapter(base) else base) if config.rollout_backend == "vllm" else None
    rollout, *rollout_counters = _rollout(config, tokenizer, tasks, vllm_base)
    lender = next((c for c in rollout_counters if hasattr(c, "check_engine")), None)

    def probe(m: Any, step: int) -> dict[str, Any]:
        engine = lender.check_engine(m, step) if lender else None  # rollouts on vLLM: the checks too
        where = {"check_backend": "vllm" if engine is not None else "transformers"}
        # validation: greedy, as the gate's evals decode, so the checkpoint chosen is the one they would rank
        greedy = bool(config.validation_tasks)
        rates = heldout_metrics(m, tokenizer, checks, config.seed, config.max_tokens,
                                config.success_threshold, prefix_cache=config.prefix_cache,
                                max_steps=AGENT_STEPS if get_env(checks[0].env).multi_turn else 1,
                                engine=engine, temperature=0.0 if greedy else 0.7,
                                prefix="val" if greedy else "heldout")
        if config.validation_tasks:  # a smooth score beside greedy success: selection ranks success ties by it
            t0 = time.perf_counter()
            rates["val_margin"] = round(margin_score(reference_margins(m, tokenizer, checks)), 5)
            rates["margin_s"] = round(time.perf_counter() - t0, 3)
        return where | rates
    replay = None
    if config.method == "grpo" and config.replay_weight:  # every train task but the validation slice
        from flywheel.tasks.training.replay import Replay, same_tools

        pool = load_tasks(config.model_copy(update={"skip_tasks": None, "train_limit": None}), "train")
        if config.replay_focus == "tools":
            pool = same_tools(pool, tasks)
        replay = Replay(tokenizer, pool, config.seed, config.replay_rows, config.replay_weight, config.prefix_cache)
    counters = [*rollout_counters, *([replay] if replay else [])] if config.method == "grpo" else []
    log = TrainLog(out / "metrics.jsonl", probe, config.check_interval, counters, notify, best)
    common = {"output_dir": str(out / "checkpoints"), "max_steps": config.steps,
              "learning_rate": config.learning_rate,
              "logging_steps": 1, "save_steps": config.save_steps, "save_total_limit": 2, "seed": config.seed,
              "report_to": [], "bf16": cuda, "gradient_checkpointing": False, "use_cpu": not cuda,
              "disable_tqdm": True}
    t0 = time.perf_counter()
    score_labelled_positions_only()
    set_seed(config.seed)  # before the trainer: a new LoRA adapter's initial weights come from this state
    trainer = _trainer(config, model, tokenizer, tasks, common, [log], rollout, replay)
    trainer.remove_callback(PrinterCallback)  # it prints every log dict; TrainLog writes them as JSON lines
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        for counter in rollout_counters:  # a vLLM engine for the rollouts goes with the training
            if hasattr(counter, "close"):
                counter.close()
    adapter, selected = save_adapter(trainer, out, best, base if is_adapter(base) else None)
    history = [json.loads(x) for x in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    result = {"method": config.method, "adapter": str(adapter), "adapter_hash": fingerprint(adapter),
              "selected_step": config.steps if selected is None else selected,
              "flags": [f for r in history for f in r.get("flags", [])],
              "base_model": str(base), "resumed_from": resume, "train_s": round(time.perf_counter() - t0, 2),
              "tasks": len(tasks), "heldout_tasks": len(heldout), "config": config.model_dump(),
              "history": history}
    write_text_atomic(out / "train_log.json", json.dumps(result, indent=2, default=str) + "\n")
    return result
