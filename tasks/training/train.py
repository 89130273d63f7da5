"""Training with TRL and a PEFT LoRA adapter: SFT on reference answers, GRPO against the project's verifiers.

Contract:
- ``sft_rows`` / ``grpo_rows`` turn published tasks into TRL's conversational prompt-completion rows (the same
  prompt rendering as evaluation: tools in the system turn); GRPO rows carry the Task JSON in a ``task`` column,
  which the verifiers' reward functions read.
- ``train(config)`` trains one adapter in ``OUT/checkpoints`` (resumed from the last checkpoint when one
  exists), saves it to ``OUT/adapter`` atomically and returns the log. ``OUT/metrics.jsonl`` gets one line per
  step: loss, step time, for GRPO the training reward and the invalid-output and unsafe-action rates of the
  step's completions, and every ``eval_interval`` steps (and at the last) the held-out reward, success,
  invalid-output and unsafe-action rates of the model being trained (``eval_limit`` held-out tasks, one sample
  each, the rollout seeds ``flywheel eval`` uses); on a validation slice (``validation`` > 0) also ``val_margin``,
  the mean sigmoid of the reference answers' teacher-forced margins (``margins.py``), which checkpoint selection
  ranks success ties by (``selection.Best``).
- Multi-turn envs (workplace): SFT on the gold episodes (``episodes.py``: the reference calls replayed in a fresh
  session and rendered as the agent loop renders them, the loss on the assistant turns only); held-out checks run
  agent episodes. GRPO on multi-turn: one completion is one whole episode in its own fresh session (``episodes.py``,
  TRL's ``rollout_func``), the observation tokens masked out of the loss (``env_mask``), the reward the verifier's
  verdict on the final state.
- GRPO with replay (``replay_weight`` > 0): an SFT loss on reference answers of every train task is added to each
  update (``replay.py``), so GRPO keeps what SFT taught on the tasks it does not train on.
- GRPO with a KL term (``beta`` > 0) from an adapter: TRL keeps a frozen copy of the start adapter as the reference
  ("ref"), so the KL measures drift from the start policy (e.g. SFT), not from the base model; the copy is not saved.
- CUDA and bf16 when a GPU is present; the same code runs on CPU, where TRL's fused LM head scores only the
  labelled positions, as it does on GPUs (``score_labelled_positions_only``).
- Reproducible: the same seed, data and config on CPU give a byte-identical adapter (the RNGs are seeded before the
  LoRA adapter is created; GRPO samples under seeds derived from the run seed and the step).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flywheel.schemas import Task
from flywheel.schemas.records import MAX_SEED
from flywheel.tasks.data.validate import reference_completion
from flywheel.tasks.files import changed_options, check_destination, read_claim, share_tree, write_text_atomic
from flywheel.tasks.training.margins import margin_score, reference_margins
from flywheel.tasks.training.replay import FOCUS_HELP, REPLAY_HELP
from flywheel.tasks.training.rewards import REWARD_HELP, RewardKind
from flywheel.tasks.training.rollout import prompt
from flywheel.tasks.training.selection import Best
from flywheel.tasks.training.vllm_rollout import ROLLOUT_HELP
from flywheel.verifiers.envs import env_names, get_env

if TYPE_CHECKING:  # train_log imports transformers' Trainer (7 s): `TrainConfig` and the CLI must not wait for it
    from flywheel.tasks.training.train_log import VerifierReward

AGENT_STEPS = 6  # held-out agent episodes stop here, as `flywheel eval --max-steps` does by default


def single_turn_envs() -> tuple[str, ...]:
    """The envs training supports: every env whose spec is not multi-turn."""
    return tuple(n for n in env_names() if not get_env(n).multi_turn)


TRAIN_ON_HELP = ("GRPO with --skip-tasks: train on the eval's mixed tasks (solved in some samples, not all), or on "
                 "its failures (mixed and never solved; with a greedy eval, the tasks greedy decoding gets wrong).")
SCALE_HELP = ("GRPO: how a group's rewards become advantages (TRL's scale_rewards): group (minus the group mean, over "
              "the group's std) | batch (over the batch's std) | none (minus the mean only, as in Dr. GRPO: a "
              "nearly solved group's one failure is not magnified by its small std).")


def skip_ids(path: str, train_on: str = "mixed") -> set[str]:
    """Task ids to leave out by an eval on the train split (its per_task.parquet's ``mark``): all but the mixed ones,
    or, ``train_on="failures"``, the always solved ones."""
    import polars as pl

    try:
        marks = pl.read_parquet(path, columns=["task_id", "mark"])
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"--skip-tasks {path} is not a per_task.parquet with task_id and mark columns ({first}); "
                         "pass the per_task.parquet of `flywheel eval --split train --samples K`") from None
    kept = ["mixed", "never"] if train_on == "failures" else ["mixed"]
    return set(marks.filter(~pl.col("mark").is_in(kept))["task_id"].to_list())


def union_marks(greedy: str, sampled: str, out: Path) -> Path:
    """``flywheel run --curriculum both``: one per_task file marking "mixed" each task a greedy eval got wrong or K
    samples solved only some of the time, the others "always" (so both ``train_on`` values keep the same tasks)."""
    import io

    import polars as pl

    from flywheel.tasks.files import write_bytes_atomic

    first = pl.read_parquet(greedy, columns=["task_id", "mark"])
    second = pl.read_parquet(sampled, columns=["task_id", "mark"]).rename({"mark": "sampled"})
    if sorted(first["task_id"]) != sorted(second["task_id"]):
        raise ValueError(f"{greedy} and {sampled} mark different tasks: the two curriculum evals must cover the same")
    either = (pl.col("mark") == "never") | (pl.col("sampled") == "mixed")
    marks = first.join(second, on="task_id").select(
        "task_id", mark=pl.when(either).then(pl.lit("mixed")).otherwise(pl.lit("always"))).sort("task_id")
    buffer = io.BytesIO()
    marks.write_parquet(buffer)
    write_bytes_atomic(out, buffer.getvalue())
    return out


def decision_sides(tasks: list[Task]) -> dict[str, tuple[str, str]]:
    """Each task's decision: its first reference call's tool, and the argument keys that call sets (crm.find_contact
    by ``name`` or by ``company``); tasks without a reference call have none."""
    return {t.id: (c.tool, ",".join(sorted(c.args))) for t in tasks for c in t.reference.calls[:1]}


def balance_marks(per_task: str, tasks: list[Task], train_on: str, out: Path) -> tuple[Path, int]:
    """``flywheel run --curriculum-balance``: the picks of a tool that sides of a decision split unevenly (6 by name,
    3 by company) teach GRPO the larger side, so each side keeps as many picks as the tool's rarest side has (the first
    by task id) and the rest are marked "always", which GRPO skips. ``tasks``: the train tasks (their reference
    calls). Returns the marks file and the number of picks left out."""
    import io

    import polars as pl

    from flywheel.tasks.files import write_bytes_atomic

    marks = pl.read_parquet(per_task, columns=["task_id", "mark"]).sort("task_id")
    side, skipped = decision_sides(tasks), skip_ids(per_task, train_on)
    by_tool: dict[str, dict[str, list[str]]] = {}
    for i in marks["task_id"]:
        if i not in skipped and i in side:
            by_tool.setdefault(side[i][0], {}).setdefault(side[i][1], []).append(i)
    drop = [i for sides in by_tool.values() for ids in sides.values() for i in ids[min(map(len, sides.values())):]]
    left_out = pl.col("task_id").is_in(pl.Series(drop, dtype=pl.Utf8).implode())
    buffer = io.BytesIO()
    marks.with_columns(mark=pl.when(left_out).then(pl.lit("always")).otherwise("mark")).write_parquet(buffer)
    write_bytes_atomic(out, buffer.getvalue())
    return out, len(drop)


LORA_TARGETS: dict[str, Any] = {"attention": ["q_proj", "k_proj", "v_proj", "o_proj"], "all-linear": "all-linear"}


class TrainConfig(BaseModel):
    """Checked up front, files included, so an expected error is one line before any flow run starts."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dataset: str
    out: str
    method: Literal["sft", "grpo"] = "grpo"
    model: str | None = None  # base checkpoint, or an adapter to keep training (e.g. the SFT warm start)
    skip_tasks: str | None = None  # per_task.parquet of an eval on the train split: always/never solved are left out
    train_on: Literal["mixed", "failures"] = Field(default="mixed", description=TRAIN_ON_HELP)
    validation: int = Field(default=0, ge=0, le=100_000)  # the last N train tasks: checks and checkpoint selection
    limit: int | None = Field(default=None, ge=1)  # the first N train tasks by id (before --skip-tasks)
    max_steps: int = Field(default=20, ge=1, le=1_000_000)
    batch_size: int = Field(default=8, ge=1, le=4096)
    # rows per forward/backward pass (gradient accumulation up to batch_size; None: the whole batch at once): bounds
    # memory when a batch of long multi-turn episodes would not fit
    micro_batch: int | None = Field(default=None, ge=1, le=4096)
    learning_rate: float = Field(default=1e-4, gt=0, le=1.0)
    lora_r: int = Field(default=16, ge=1, le=1024)
    lora_alpha: int = Field(default=32, ge=1, le=4096)
    lora_targets: Literal["attention", "all-linear"] = "attention"  # all-linear: the MLP layers too
    num_generations: int = Field(default=8, ge=2, le=256)
    loss_type: Literal["grpo", "dapo", "dr_grpo", "gspo"] = "dapo"
    beta: float = Field(default=0.0, ge=0.0, le=100.0)
    scale_rewards: Literal["group", "batch", "none"] = Field(default="group", description=SCALE_HELP)
    max_completion_length: int = Field(default=64, ge=1, le=8192)  # eval's --max-tokens bound: it evaluates with it
    temperature: float = Field(default=1.0, gt=0.0, le=2.0)
    eval_interval: int = Field(default=10, ge=0)  # 0: no held-out checks while training
    eval_limit: int = Field(default=32, ge=1)
    success_threshold: float = Field(default=1.0, gt=-1.0, le=1.0)
    save_steps: int = Field(default=10, ge=1)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    # GRPO rollouts and held-out checks prefill each prompt once for its G completions; GRPO's updates and replay
    # run a pass's shared prompt prefix once (shared_prefix.py). False: the old paths, for comparison
    prefix_cache: bool = True
    refill: int = Field(default=2, ge=0, le=64)  # GRPO: redraw a group whose G rewards are all equal, this many times
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
            ids = ids.head(self.limit) if self.limit else ids
            if not set(ids) - skip:
                marked = "always solved" if self.train_on == "failures" else "always or never solved"
                raise ValueError(f"no train tasks left to train on: --skip-tasks {self.skip_tasks} marks all "
                                 f"{len(ids)} train tasks {marked} (check --skip-tasks, --train-on and --limit)")
        if self.rollout_backend == "vllm":
            from flywheel.tasks.inference.policy import check_vllm_rollouts

            if self.method != "grpo":
                raise ValueError("--rollout-backend vllm applies to GRPO only (SFT samples nothing); drop it or pass "
                                 "--method grpo")
            check_vllm_rollouts("--rollout-backend")
        return self


def sft_rows(tasks: list[Task]) -> list[dict[str, Any]]:
    return [{"prompt": prompt(t), "completion": [{"role": "assistant", "content": reference_completion(t)}]}
            for t in tasks]


def grpo_rows(tasks: list[Task]) -> list[dict[str, Any]]:
    from flywheel.tasks.training.episodes import agent_prompt

    return [{"prompt": agent_prompt(t) if get_env(t.env).multi_turn else prompt(t), "task": t.model_dump_json()}
            for t in tasks]


def load_tasks(config: TrainConfig, split: str) -> list[Task]:
    import polars as pl

    from flywheel.tasks.data.publish import read_split

    frame = read_split(Path(config.dataset), "heldout" if split == "heldout" else "train",
                       ["id", "task"]).sort("id")  # checked against the manifest
    if split != "heldout" and config.validation:  # the validation slice: the last N train tasks, never trained on
        if frame.height <= config.validation:
            raise ValueError(f"--validation {config.validation} leaves no train task ({frame.height} in the dataset)")
        keep = frame.height - config.validation
        frame = frame.tail(config.validation) if split == "validation" else frame.head(keep)
    if split == "train" and config.limit:  # the first N, then the skipped ones out: --skip-tasks of an eval with
        frame = frame.head(config.limit)  # the same --limit covers exactly these
    if split == "train" and config.skip_tasks:
        frame = frame.filter(~pl.col("id").is_in(list(skip_ids(config.skip_tasks, config.train_on))))
    if split == "heldout":
        frame = frame.head(config.eval_limit)
    if frame.height == 0:
        raise ValueError(f"no {split} tasks left to train on (check --skip-tasks and --limit)")
    tasks = [Task.model_validate_json(t) for t in frame["task"]]
    return tasks


def checkpoint_complete(ckpt: Path) -> bool:
    """Transformers writes a checkpoint's trainer_state.json after its weights and optimizer, in place: a run killed
    mid-save leaves it missing, empty or cut."""
    try:
        json.loads((ckpt / "trainer_state.json").read_text())
        return True
    except (OSError, ValueError):
        return False


def last_checkpoint(folder: Path) -> str | None:
    """The latest complete checkpoint; one killed mid-save is skipped (resuming from it crashed on its state file)."""
    ckpts = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])) if folder.is_dir() else []
    return next((str(c) for c in reversed(ckpts) if checkpoint_complete(c)), None)


def _save_adapter(trainer: Any, out: Path, best: Any = None, start: Path | None = None) -> tuple[Path, int | None]:
    """Save to a unique temp folder (with the best checkpoint's weights when ``best`` has one; the files of
    ``start``, the start adapter, when that is the best), then rename it in; a failed save leaves no temp folder
    behind. Returns the adapter and the step it was selected at (None: last)."""
    for stale in out.glob(".adapter-tmp*"):  # a killed earlier save of this OUT (which one config owns)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".adapter-tmp-", dir=out))
    target = out / "adapter"
    try:
        trainer.save_model(str(tmp))
        selected = best.install(tmp, start) if best is not None else None
        shutil.rmtree(tmp / "ref", ignore_errors=True)  # TRL's frozen copy of the start adapter (beta > 0): not ours
        share_tree(tmp)  # mkdtemp and safetensors make it private; the adapter is read like any output
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target, selected


def check_train_paths(out: Path, start: Path, registry: Path | None, parent: str | None) -> None:
    """Before training (the CLI, and ``train_policy`` itself: a deployment run skips the CLI): OUT lies outside
    published versions and registries and does not hold the start adapter (the new adapter/ replaces
    OUT/adapter); the registry is usable now, not found damaged after training: one that reads whole (and knows
    --parent), or a new or empty folder, never a file, one inside a published version, or OUT's folder. ValueError."""
    from flywheel.tasks.release.registry import Registry

    check_destination(out, "--out")
    here = out.resolve()
    if start.resolve() == here or here in start.resolve().parents:
        raise ValueError(f"--out {out} holds the --model adapter {start}: training writes OUT/adapter and would "
                         "destroy its own input; choose another --out")
    if registry is None:
        if parent:
            raise ValueError(f"--parent {parent} names a registry version: pass --registry too")
        return
    check_destination(registry, "--registry", registry_ok=True)
    if registry.resolve() == here or registry.resolve() in here.parents:
        raise ValueError(f"--out {out} is inside --registry {registry}: a registry holds registered versions "
                         "only; choose an --out outside it")
    if here in registry.resolve().parents:  # training replaces OUT/adapter, rotates OUT/checkpoints
        raise ValueError(f"--registry {registry} is inside --out {out}: training writes and replaces folders there; "
                         "choose a registry outside OUT")
    reg = Registry(registry)
    if reg.exists():
        reg.events()  # a damaged log is one line now
        if parent:
            reg.version(parent)  # so is an unknown --parent (it would only fail at registration, after training)
    elif registry.exists() and not registry.is_dir():
        raise ValueError(f"--registry {registry} is a file; name a folder")
    elif registry.is_dir() and any(registry.iterdir()):
        raise ValueError(f"--registry {registry} is a folder of other files, not a model registry: name an existing "
                         "registry or a new folder")
    elif parent:
        raise ValueError(f"--parent {parent}: there is no registry at {registry} yet to hold it")


def check_claim(out: Path, config: TrainConfig) -> None:
    """OUT belongs to one config: resuming checkpoints of another run would silently mix two trainings. Run by the
    CLI before any flow, and again by ``train``. ValueError: OUT holds another run, or a train_config.json that is
    not one (a FIFO, a link, not a JSON object: one line, never a hang)."""
    found = read_claim(out / "train_config.json", "a training run's config")
    if found is None:
        return
    if changed_options(found, config):
        raise ValueError(f"{out} holds a training run with other options; rerun with the same options to resume it, "
                         "or pass a new --out")


def _claim(out: Path, config: TrainConfig) -> None:
    check_claim(out, config)
    write_text_atomic(out / "train_config.json", json.dumps(config.model_dump(mode="json"), indent=2) + "\n")


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
             callbacks: list[Any], reward: VerifierReward, rollout: Any = None, replay: Any = None) -> Any:
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
                      max_completion_length=config.max_completion_length, temperature=config.temperature, **common)
    if replay is not None:
        from flywheel.tasks.training.replay import replay_trainer

        GRPOTrainer = replay_trainer(GRPOTrainer, replay)  # noqa: N806 (TRL's trainer plus the replay loss)
    if config.prefix_cache:
        from flywheel.tasks.training.shared_prefix import shared_prefix_trainer

        GRPOTrainer = shared_prefix_trainer(GRPOTrainer)  # noqa: N806 (each pass's shared prompt prefix once)
    return GRPOTrainer(model=model, reward_funcs=[reward], args=args,
                       train_dataset=Dataset.from_list(grpo_rows(tasks)),
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

    trl_utils._use_triton = _always  # type: ignore[attr-defined]


def _always(device: Any) -> bool:
    return True


def train(config: TrainConfig, notify: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    import datasets
    import torch
    from transformers import PrinterCallback, set_seed
    from transformers.utils import logging as hf_logging

    from flywheel.tasks.inference.models import adapter_base, fingerprint, is_adapter, load_causal_lm, resolve_model
    from flywheel.tasks.training.train_log import TrainLog, VerifierReward, heldout_metrics, trim_log

    hf_logging.disable_progress_bar()  # progress goes to metrics.jsonl and ``notify``, not to bars on stderr
    datasets.disable_progress_bars()

    out = Path(config.out)
    tasks, heldout = load_tasks(config, "train"), load_tasks(config, "heldout")
    out.mkdir(parents=True, exist_ok=True)
    _claim(out, config)
    cuda = torch.cuda.is_available()
    base = resolve_model(config.model)
    model, tokenizer = load_causal_lm(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if cuda:
        model = model.to("cuda")
    if get_env(tasks[0].env).multi_turn:
        from flywheel.tasks.training.episodes import EpisodeReward

        reward: Any = EpisodeReward()  # the verdict of each episode's own session
    else:
        reward = VerifierReward(tasks[0].env, config.success_threshold, config.reward)
    resume = last_checkpoint(out / "checkpoints")
    trim_log(out / "metrics.jsonl", int(resume.rsplit("-", 1)[-1]) if resume else 0)

    checks = load_tasks(config, "validation") if config.validation else heldout  # the gate's tasks never select
    best = Best(out) if config.validation else None
    if best is not None:
        best.drop_after(int(resume.rsplit("-", 1)[-1]) if resume else 0)

    vllm_base = (adapter_base(base) if is_adapter(base) else base) if config.rollout_backend == "vllm" else None
    rollout, *rollout_counters = _rollout(config, tokenizer, tasks, vllm_base)
    lender = next((c for c in rollout_counters if hasattr(c, "check_engine")), None)

    def probe(m: Any, step: int) -> dict[str, Any]:
        engine = lender.check_engine(m, step) if lender else None  # rollouts on vLLM: the checks too (22x faster)
        where = {"check_backend": "vllm" if engine is not None else "transformers"}
        # validation: greedy, as the gate's evals decode, so the checkpoint chosen is the one they would rank
        sampling = {"temperature": 0.0, "prefix": "val"} if config.validation else {}
        rates = heldout_metrics(m, tokenizer, checks, config.seed, config.max_completion_length,
                                config.success_threshold, prefix_cache=config.prefix_cache,
                                max_steps=AGENT_STEPS if get_env(checks[0].env).multi_turn else 1,
                                engine=engine, **sampling)
        if config.validation:  # a smooth score beside greedy success: selection ranks success ties by it
            t0 = time.perf_counter()
            rates["val_margin"] = round(margin_score(reference_margins(m, tokenizer, checks)), 5)
            rates["margin_s"] = round(time.perf_counter() - t0, 3)
        return where | rates
    replay = None
    if config.method == "grpo" and config.replay_weight:  # every train task but the validation slice
        from flywheel.tasks.training.replay import Replay, same_tools

        pool = load_tasks(config.model_copy(update={"skip_tasks": None, "limit": None}), "train")
        if config.replay_focus == "tools":
            pool = same_tools(pool, tasks)
        replay = Replay(tokenizer, pool, config.seed, config.replay_rows, config.replay_weight, config.prefix_cache)
    counters = [reward, *rollout_counters, *([replay] if replay else [])] if config.method == "grpo" else []
    log = TrainLog(out / "metrics.jsonl", probe, config.eval_interval, counters, notify, best)
    common = {"output_dir": str(out / "checkpoints"), "max_steps": config.max_steps,
              "learning_rate": config.learning_rate,
              "logging_steps": 1, "save_steps": config.save_steps, "save_total_limit": 2, "seed": config.seed,
              "report_to": [], "bf16": cuda, "gradient_checkpointing": False, "use_cpu": not cuda,
              "disable_tqdm": True}
    t0 = time.perf_counter()
    score_labelled_positions_only()
    set_seed(config.seed)  # before the trainer: a new LoRA adapter's initial weights come from this state
    trainer = _trainer(config, model, tokenizer, tasks, common, [log], reward, rollout, replay)
    trainer.remove_callback(PrinterCallback)  # it prints every log dict; TrainLog writes them as JSON lines
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        for counter in rollout_counters:  # a vLLM engine for the rollouts goes with the training
            if hasattr(counter, "close"):
                counter.close()
    adapter, selected = _save_adapter(trainer, out, best, base if is_adapter(base) else None)
    history = [json.loads(x) for x in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    result = {"method": config.method, "adapter": str(adapter), "adapter_hash": fingerprint(adapter),
              "selected_step": config.max_steps if selected is None else selected,
              "flags": [f for r in history for f in r.get("flags", [])],
              "base_model": str(base), "resumed_from": resume, "train_s": round(time.perf_counter() - t0, 2),
              "tasks": len(tasks), "heldout_tasks": len(heldout), "config": config.model_dump(),
              "history": history}
    write_text_atomic(out / "train_log.json", json.dumps(result, indent=2, default=str) + "\n")
    return result
