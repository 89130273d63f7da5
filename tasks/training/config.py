"""``TrainConfig``: the options of one training run (``flywheel train``, the pipeline's train-policy task), checked up
front, files included, so an expected error is one line before any flow run starts. ``flywheel run`` names the same
knobs ``sft_X`` / ``grpo_X`` for its two stages (flows/config.py: ``stage_train_options``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flywheel.schemas.records import MAX_SEED
from flywheel.tasks.training.curriculum import skip_ids
from flywheel.tasks.training.replay import FOCUS_HELP, REPLAY_HELP
from flywheel.tasks.training.rewards import REWARD_HELP, RewardKind
from flywheel.tasks.training.vllm_rollout import ROLLOUT_HELP
from flywheel.verifiers.envs import env_names, get_env

# options renamed since runs recorded them (train_config.json): a record with the old name is the same run
RENAMED = {"max_steps": "steps", "max_completion_length": "max_tokens", "eval_interval": "check_interval",
           "validation": "validation_tasks", "limit": "train_limit"}

# options only GRPO reads: an SFT run's record of them does not make it another run
GRPO_ONLY = frozenset({"num_generations", "loss_type", "beta", "scale_rewards", "temperature", "refill", "reward",
                       "replay_weight", "replay_rows", "replay_focus", "rollout_backend"})
AGENT_STEPS = 6  # held-out agent episodes stop here, as `flywheel eval --max-steps` does by default


def single_turn_envs() -> tuple[str, ...]:
    """The envs training supports: every env whose spec is not multi-turn."""
    return tuple(n for n in env_names() if not get_env(n).multi_turn)


TRAIN_ON_HELP = ("GRPO with --skip-tasks: train on the eval's mixed tasks (solved in some samples, not all), or on "
                 "its failures (mixed and never solved; with a greedy eval, the tasks greedy decoding gets wrong).")
SCALE_HELP = ("GRPO: how a group's rewards become advantages (TRL's scale_rewards): group (minus the group mean, over "
              "the group's std) | batch (over the batch's std) | none (minus the mean only, as in Dr. GRPO: a "
              "nearly solved group's one failure is not magnified by its small std).")


LORA_TARGETS: dict[str, Any] = {"attention": ["q_proj", "k_proj", "v_proj", "o_proj"], "all-linear": "all-linear"}


class TrainConfig(BaseModel):
    """Checked up front, files included, so an expected error is one line before any flow run starts."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dataset: str = Field(description="A published dataset version folder (OUT/NAME/VERSION).")
    out: str = Field(description="Output folder: adapter/, checkpoints/, metrics.jsonl, train_log.json, eval/.")
    method: Literal["sft", "grpo"] = Field(default="grpo", description="sft (reference answers) | grpo (verifier "
                                           "rewards).")
    model: str | None = Field(default=None, description="Base checkpoint, or a PEFT adapter to keep training (e.g. "
                              "the SFT adapter); default: the embedded model.")
    skip_tasks: str | None = Field(default=None, description="per_task.parquet of `flywheel eval --split train "
                                   "--samples K`: tasks always or never solved are left out.")
    train_on: Literal["mixed", "failures"] = Field(default="mixed", description=TRAIN_ON_HELP)
    validation_tasks: int = Field(default=0, ge=0, le=100_000, description="Hold the last N train tasks apart (never "
                                  "trained on): the periodic checks run on them and the best checkpoint by their "
                                  "success is the adapter; 0: checks on the held-out tasks, the last checkpoint kept.")
    train_limit: int | None = Field(default=None, ge=1, description="Train on the first N train tasks (ordered by "
                                    "id, before --skip-tasks).")
    steps: int = Field(default=20, ge=1, le=1_000_000, description="Optimizer steps.")
    batch_size: int = Field(default=8, ge=1, le=4096, description="SFT: rows per step; GRPO: completions per step "
                            "(a multiple of --num-generations).")
    micro_batch: int | None = Field(default=None, ge=1, le=4096, description="Rows per forward/backward pass; each "
                                    "step accumulates the gradients of --batch-size / N passes (default: the whole "
                                    "batch at once). Bounds memory on long multi-turn episodes.")
    learning_rate: float = Field(default=1e-4, gt=0, le=1.0, description="Learning rate.")
    lora_r: int = Field(default=16, ge=1, le=1024, description="LoRA rank (alpha is twice the rank).")
    lora_alpha: int = Field(default=32, ge=1, le=4096)
    lora_targets: Literal["attention", "all-linear"] = Field(default="attention", description="LoRA on the "
                                                             "attention projections (attention) or on every linear "
                                                             "layer, MLP included (all-linear).")
    num_generations: int = Field(default=8, ge=2, le=256, description="GRPO: completions per prompt.")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "gspo"] = Field(default="dapo", description="GRPO loss: grpo | "
                                                                  "dapo | dr_grpo | gspo (sequence-level IS).")
    beta: float = Field(default=0.0, ge=0.0, le=100.0, description="GRPO: KL coefficient (0: no reference pass). "
                        "From an adapter (--model), the KL anchors on that adapter's policy, not the base model.")
    scale_rewards: Literal["group", "batch", "none"] = Field(default="group", description=SCALE_HELP)
    max_tokens: int = Field(default=64, ge=1, le=8192, description="Max new tokens per completion (and in held-out "
                            "checks and the final eval).")
    temperature: float = Field(default=1.0, gt=0.0, le=2.0)
    check_interval: int = Field(default=10, ge=0, description="Held-out (or --validation-tasks) reward and success "
                                "every N steps (0: none while training).")
    eval_limit: int = Field(default=32, ge=1, description="Held-out tasks in the periodic checks and the final eval.")
    success_threshold: float = Field(default=1.0, gt=-1.0, le=1.0)
    save_steps: int = Field(default=10, ge=1, description="Checkpoint every N steps (a killed run resumes from the "
                            "last one).")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Training and rollout seed.")
    prefix_cache: bool = Field(default=True, description="GRPO rollouts and evals: prefill each prompt once and reuse "
                               "its KV cache, and run a pass's shared prompt prefix once in the updates "
                               "(--no-prefix-cache: the old paths, for comparison).")
    refill: int = Field(default=2, ge=0, le=64, description="GRPO online filtering: a group whose G rewards are all "
                        "equal carries no signal and is replaced by a fresh task's group, up to N times (0: kept).")
    reward: RewardKind = Field(default="verifier", description=REWARD_HELP)
    replay_weight: float = Field(default=0.0, ge=0.0, le=100.0, description=REPLAY_HELP)
    replay_rows: int = Field(default=16, ge=1, le=4096, description="GRPO replay: reference answers per step.")
    replay_focus: Literal["all", "tools"] = Field(default="all", description=FOCUS_HELP)
    rollout_backend: Literal["transformers", "vllm"] = Field(default="transformers", description=ROLLOUT_HELP)

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.method == "grpo" and self.batch_size % self.num_generations:
            raise ValueError(f"GRPO needs --batch-size (completions per step, {self.batch_size}) to be a multiple of "
                             f"--num-generations ({self.num_generations}): "
                             "each prompt gets num_generations completions")
        if self.method == "sft" and self.replay_weight:
            raise ValueError("--replay-weight applies to GRPO only (SFT already trains on every reference answer); "
                             "drop it or pass --method grpo")
        if self.method == "sft" and self.beta:
            raise ValueError("--beta is GRPO's KL coefficient (SFT has no reference policy): drop it or pass --method "
                             "grpo")
        if self.replay_focus != "all" and not self.replay_weight:
            raise ValueError(f"--replay-focus {self.replay_focus} chooses what GRPO replays: give --replay-weight "
                             "above 0 too (or drop --replay-focus)")
        if self.micro_batch is not None and self.batch_size % self.micro_batch:
            raise ValueError(f"--micro-batch ({self.micro_batch}) must divide --batch-size ({self.batch_size}): each "
                             "step accumulates the gradients of batch-size / micro-batch passes")
        if not (Path(self.dataset) / "manifest.json").is_file():
            raise ValueError(f"--dataset {self.dataset} is not a published version folder (no manifest.json); "
                             "pass OUT/NAME/VERSION as printed by `flywheel generate`")
        from flywheel.tasks.data.publish import check_version

        check_version(Path(self.dataset))  # files, manifest and every row training reads: one line, before any flow
        if self.skip_tasks and not Path(self.skip_tasks).is_file():
            what = "is not a regular file" if os.path.lexists(self.skip_tasks) else "does not exist"
            raise ValueError(f"--skip-tasks {self.skip_tasks} {what}: pass the per_task.parquet of "
                             "`flywheel eval --split train`")
        if self.skip_tasks:  # a corrupted file, or one that skips everything: this one line, not a training traceback
            from flywheel.tasks.data.publish import read_split

            skip = skip_ids(self.skip_tasks, self.train_on)
            ids = read_split(Path(self.dataset), "train", ["id"])["id"].sort()
            ids = ids.head(self.train_limit) if self.train_limit else ids
            if not set(ids) - skip:
                marked = "always solved" if self.train_on == "failures" else "always or never solved"
                raise ValueError(f"no train tasks left to train on: --skip-tasks {self.skip_tasks} marks all "
                                 f"{len(ids)} train tasks {marked} (check --skip-tasks, --train-on and --train-limit)")
        if self.rollout_backend == "vllm":
            from flywheel.tasks.inference.policy import check_vllm_rollouts

            if self.method != "grpo":
                raise ValueError("--rollout-backend vllm applies to GRPO only (SFT samples nothing); drop it or pass "
                                 "--method grpo")
            check_vllm_rollouts("--rollout-backend")
        return self
