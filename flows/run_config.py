"""``flywheel run``'s options (``RunConfig``), its profiles (flows/profiles/*.yaml, one loader) and how a run's
options become each training stage's (``stage_options``: ``--grpo-X`` is ``flywheel train --X`` for GRPO)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from flywheel.flows.config_checks import (
    BACKEND_HELP,
    MAX_ROWS,
    PREFIX_CACHE_HELP,
    Curriculum,
    LoraTargets,
    Profile,
    ReplayFocus,
    RunBackend,
    heldout_advice,
    rows_per_tool,
)
from flywheel.schemas.records import MAX_SEED
from flywheel.tasks.training.replay import FOCUS_HELP, REPLAY_HELP
from flywheel.tasks.training.rewards import REWARD_HELP, RewardKind

PROFILES = Path(__file__).parent / "profiles"  # the named profiles: NAME.yaml ("default" is RunConfig's fields)
MAX_PROFILE_BYTES = 64 * 1024
PROFILE_SECTIONS = {"all": "every env", "tool_catalog": "single-turn envs with a tool catalog, over `all`"}


def profile_path(profile: str) -> Path | None:
    """The YAML file of ``--profile``: a name in flows/profiles/ or a file's path; None for "default"."""
    if profile == "default":
        return None
    named = PROFILES / f"{profile}.yaml"
    return named if named.is_file() and "/" not in profile else Path(profile)


def load_profile(profile: str) -> dict[str, dict[str, Any]]:
    """``--profile``'s sections (``PROFILE_SECTIONS``), each a mapping of ``flywheel run`` options, read from its YAML
    file (the one loader of profiles and recipes). ValueError saying what to fix."""
    import yaml

    path = profile_path(profile)
    if path is None:
        return {}
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        names = ", ".join(["default", *sorted(p.stem for p in PROFILES.glob("*.yaml"))])
        raise ValueError(f"--profile {profile}: choose one of {names}, or the path of a .yaml file shaped like "
                         "flows/profiles/full.yaml")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_PROFILE_BYTES + 1)
        if len(raw) > MAX_PROFILE_BYTES:
            raise ValueError(f"--profile {profile}: larger than {MAX_PROFILE_BYTES // 1024} KB; a profile is a few "
                             "dozen options")
        data = yaml.safe_load(raw.decode("utf-8")) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--profile {profile}: not readable YAML ({' '.join(str(exc).split())[:200]})") from None
    unknown = [k for k in data if k not in PROFILE_SECTIONS] if isinstance(data, dict) else None
    if unknown is None or unknown:
        raise ValueError(f"--profile {profile}: the file must map sections {', '.join(PROFILE_SECTIONS)} to options"
                         f"{f', not {str(unknown[0])[:80]!r}' if unknown else ''}")
    fixed = {"profile", "out", "env", "seed"}
    for section, values in data.items():
        bad = [k for k in values if k not in RunConfig.model_fields or k in fixed] if isinstance(values, dict) \
            else ["(not a mapping)"]
        if bad:
            raise ValueError(f"--profile {profile}: section {section}: {str(bad[0])[:80]} is not a `flywheel run` "
                             "option a profile sets; see `flywheel run --help`")
    return {k: dict(v) for k, v in data.items()}


def profile_values(profile: str, env: str) -> dict[str, Any]:
    """``--profile``'s values for ``env``: its ``all`` section, with ``tool_catalog`` over it for single-turn envs with
    a tool catalog; an env's own ``run_defaults`` win where they are larger sizes or choices of its own (workplace's
    lr and reward)."""
    from flywheel.verifiers.envs import get_env

    spec, sections = get_env(env), load_profile(profile)
    full = {**sections.get("all", {}), **(sections.get("tool_catalog", {}) if spec.tools_path and not spec.multi_turn
                                         else {})}
    preset = dict(spec.run_defaults)
    return {k: max(v, preset[k]) if isinstance(v, int) and isinstance(preset.get(k), int) else preset.get(k, v)
            for k, v in full.items()}


def full_profile(env: str) -> dict[str, Any]:
    """``--profile full``'s values for ``env`` (``profile_values``)."""
    return profile_values("full", env)


class RunConfig(BaseModel):
    """``flywheel run``: sizes chosen so the whole tool_call loop fits in a quarter hour on 2 CPU cores
    (bench/results/learning.md); an env's ``run_defaults`` (``EnvSpec``) replace them for that env, and a profile
    (``--profile full``: flows/profiles/full.yaml, ``profile_values``) sets its own over them; options given win."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    profile: Profile = Field(default="default", description="default: the loop in a quarter hour on 2 cores | full: "
                             "about an hour with vLLM installed, at least 200 held-out tasks per eval (tool_call: "
                             "1,000), more SFT and GRPO, and for tool_call the GRPO recipe that beat SFT "
                             "(flows/profiles/full.yaml) | the path of a YAML file shaped like it (options given "
                             "still win).")

    out: str = Field(default="flywheel-run", min_length=1, description="Everything lands here: datasets/, "
                     "eval-baseline/, sft/, grpo/, registry/, summary.md, summary.json.")
    seed: int = Field(default=0, ge=0, le=MAX_SEED,
                      description="Run seed: dataset rows, rollouts and training derive from it.")
    env: str = Field(default="tool_call", description="The env of the dataset, the evals and the training "
                     "(workplace: multi-step agent episodes).")
    n: int = Field(default=300, ge=20, le=MAX_ROWS, description="Dataset rows (train + held-out).")
    heldout_fraction: float = Field(default=0.2, gt=0.0, lt=1.0, description="Share of the dataset's rows held out "
                                    "(per tool): every eval and the gate read the first --eval-limit of them.")
    workers: int = Field(default=2, ge=1, le=64)
    eval_limit: int = Field(default=48, ge=4, le=MAX_ROWS,
                            description="Held-out tasks in every eval (the gate's sample).")
    max_tokens: int = Field(default=96, ge=16, le=8192, description="Max new tokens per completion (training and "
                            "eval; per turn in agent episodes). Gold answers longer than it cannot be solved: the run "
                            "counts them in its summary (tool_call's longest is about 85).")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="eval decoding; 0: greedy, so before/after "
                               "differences are the model's, not sampling noise")
    # 100 SFT steps: fewer left an unsafe call the gate rejects (bench/results/learning.md#default-100)
    sft_steps: int = Field(default=100, ge=1, le=100_000,
                           description="SFT steps (only when the baseline decision is SFT).")
    sft_batch_size: int = Field(default=4, ge=1, le=4096, description="SFT rows per step.")
    sft_learning_rate: float = Field(default=1e-3, gt=0, le=1.0, description="SFT learning rate.")
    grpo_steps: int = Field(default=4, ge=1, le=100_000, description="GRPO steps.")
    num_generations: int = Field(default=8, ge=2, le=256, description="GRPO completions per prompt.")
    grpo_prompts: int = Field(default=1, ge=1, le=256, description="GRPO prompts per step (each with "
                              "--num-generations completions).")
    lora_targets: LoraTargets = Field(default="attention", description="LoRA on the attention "
                                      "projections, or on every linear layer (MLP included).")
    grpo_learning_rate: float = Field(default=3e-5, gt=0, le=1.0, description="GRPO learning rate.")
    loss_type: str = "dapo"
    curriculum_samples: int = Field(default=4, ge=0, le=64, description="Curriculum before GRPO: sample each of the "
                                    "first --curriculum-tasks train tasks this many times with the policy GRPO starts "
                                    "from and train only on those with mixed outcomes (0: off).")
    curriculum_tasks: int = Field(default=12, ge=1, le=MAX_ROWS, description="Train tasks the curriculum samples "
                                  "(the first N by id; GRPO trains on their mixed ones).")
    curriculum: Curriculum = Field(
        default="mixed", description="mixed: GRPO trains on the tasks solved in some of --curriculum-samples samples "
        "at temperature 1, not all | failures: on those the start policy's greedy answer gets wrong (one greedy "
        "answer per task, so --curriculum-tasks can cover the whole train split; flat groups are redrawn among them) "
        "| both: on the tasks either picks (both evals run).")
    curriculum_balance: bool = Field(
        default=False, description="Curriculum: within each tool, the picks whose reference calls set the same "
        "argument keys are one side of a decision (find a contact by name, or by company); each side keeps as many "
        "picks as the tool's rarest side, so GRPO does not learn one side at the other's cost (--profile full for "
        "tool_call: on).")
    validation_tasks: int = Field(default=16, ge=0, le=MAX_ROWS, description="GRPO: train tasks held apart (the "
                                  "last N by id, at most a quarter of train) for checks every half of --grpo-steps; "
                                  "the best checkpoint on them is kept, never chosen on the gate's held-out tasks "
                                  "(0: the last checkpoint).")
    capability_envs: tuple[str, ...] = Field(default=("math", "cli"), description="General capability: envs the "
                                             "model is not trained on, whose held-out success the gate checks "
                                             "(repeat the option for each; the trained env is skipped).")
    capability_tasks: int = Field(default=8, ge=0, le=MAX_ROWS, description="Held-out tasks per capability env "
                                  "in the gate's check (0: off).")
    grpo_reward: RewardKind = Field(default="success", description=REWARD_HELP)
    grpo_replay_weight: float = Field(default=0.0, ge=0.0, le=100.0, description=REPLAY_HELP)
    grpo_replay_focus: ReplayFocus = Field(default="all", description=FOCUS_HELP)
    grpo_replay_rows: int = Field(default=16, ge=1, le=4096, description="GRPO replay: reference answers per step.")
    check_interval: int | None = Field(default=None, ge=1, le=100_000, description="GRPO: steps between checks on "
                                       "the validation slice (default: half of --grpo-steps; --profile full for "
                                       "tool_call: 2 checks after the start, at least 4 steps apart).")
    refill: int = Field(default=2, ge=0, le=64, description="GRPO online filtering: a group whose G rewards are all "
                        "equal is replaced by a fresh task's group, up to N times (0: kept).")
    train_limit: int | None = Field(default=None, ge=1, description="Train on the first N train tasks only.")
    gpu_pool: str | None = Field(default=None, description="Run training and promotion as deployments on this "
                                 "work pool (needs PREFECT_API_URL of a deploy/start.sh server).")
    dask_address: str | None = Field(default=None, description="Dask scheduler for the dataset stages.")
    prefix_cache: bool = Field(default=True, description=PREFIX_CACHE_HELP)
    eval_backend: RunBackend = Field(
        default="auto", description="Every eval of the run (curriculum sampling included): " + BACKEND_HELP)
    grpo_rollout_backend: RunBackend = Field(
        default="transformers", description="GRPO's rollouts: transformers | vllm (a vLLM engine that gets the "
        "policy's weights after every step) | auto (vllm when it is installed and GRPO samples at least 100 "
        "completions in all, or 16 agent episodes, else transformers).")

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        """Options not given come from the profile (``profile_values``: it raises the env's sizes and keeps the env's
        other choices), then the env's ``run_defaults``, then the fields."""
        if not isinstance(data, dict):
            return data
        from flywheel.verifiers.envs import env_names, get_env

        env = data.get("env", cls.model_fields["env"].default)
        known = isinstance(env, str) and env in env_names()
        preset = dict(get_env(env).run_defaults) if known else {}
        profile = data.get("profile", "default")
        full = profile_values(profile, env) if known and isinstance(profile, str) else {}
        merged = {**preset, **full, **data}
        steps = data.get("grpo_steps")  # --grpo-steps alone: 2 checks as at 24 steps (every 12), at most 1 in 4
        if "check_interval" in full and steps is not None and "check_interval" not in data:
            try:  # "12" or "12.0" from a deployment's JSON read as the field reads them; a bad one: the field's error
                merged["check_interval"] = max(4, TypeAdapter(int).validate_python(steps) // 2)
            except ValidationError:
                pass
        if not merged.get("grpo_replay_weight") and "grpo_replay_focus" not in data:
            merged.pop("grpo_replay_focus", None)  # --grpo-replay-weight 0: the profile's focus goes with it
        return merged

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        from flywheel.verifiers.envs import env_names, get_env  # env_names: the env folders, none imported

        for option, env in (("--env", self.env), *(("--capability-env", e) for e in self.capability_envs)):
            if env not in env_names():
                raise ValueError(f"{option} {env!r} is not an env; choose one of {', '.join(env_names())}")
        twice = sorted({e for e in self.capability_envs if self.capability_envs.count(e) > 1})
        if twice:
            raise ValueError(f"--capability-env {twice[0]} is given twice: give each env once")
        if self.n < rows_per_tool(self.heldout_fraction):  # no tool can hold a row out: every eval would be empty
            raise ValueError(f"--n {self.n}: the held-out split would be empty with "
                             f"{heldout_advice(self.n, self.heldout_fraction)}")
        if self.grpo_replay_focus != "all" and not self.grpo_replay_weight:
            raise ValueError(f"--grpo-replay-focus {self.grpo_replay_focus} chooses what GRPO replays: give "
                             "--grpo-replay-weight above 0 too (or drop --grpo-replay-focus)")
        if self.grpo_replay_focus == "tools" and get_env(self.env).tools_path is None:
            raise ValueError(f"--grpo-replay-focus tools: {self.env} tasks call no tools; use --grpo-replay-focus "
                             "all")
        if self.grpo_rollout_backend == "vllm":
            from flywheel.tasks.inference.policy import check_vllm_rollouts

            check_vllm_rollouts("--grpo-rollout-backend")
        return self

    def rollout_backend(self) -> Literal["transformers", "vllm"]:
        """GRPO's rollout backend, ``auto`` resolved (as evals resolve theirs: vLLM from 100 rollouts on)."""
        if self.grpo_rollout_backend != "auto":
            return self.grpo_rollout_backend
        from flywheel.tasks.inference.policy import pick_backend
        from flywheel.verifiers.envs import get_env

        rollouts = self.grpo_steps * self.grpo_prompts * self.num_generations
        return pick_backend("auto", rollouts, episodes=get_env(self.env).multi_turn)  # type: ignore


RUN_ONLY = frozenset({"temperature", "out"})  # a run's own meaning (its evals' decoding, its folder), not a stage's


def stage_options(config: RunConfig, stage: str) -> dict[str, Any]:
    """One stage's ``TrainConfig`` options, read off the run's by name: the run's ``STAGE_X`` (``sft_steps``,
    ``grpo_reward``) is the stage's ``X``; a run option named like a training option (``seed``, ``max_tokens``) is
    every stage's; ``RUN_ONLY`` are neither. One name per knob: ``flywheel train --X`` is ``flywheel run
    --STAGE-X``."""
    from flywheel.tasks.training.config import TrainConfig

    fields, values = TrainConfig.model_fields, config.model_dump()
    shared = {k: v for k, v in values.items() if k in fields and k not in RUN_ONLY}
    staged = {k.removeprefix(f"{stage}_"): v for k, v in values.items()
              if k.startswith(f"{stage}_") and k.removeprefix(f"{stage}_") in fields}
    return shared | staged


FULL_PROFILE = load_profile("full")["all"]  # the full profile's sections, as loaded (tests and docs read them)
FULL_TOOL_RECIPE = load_profile("full")["tool_catalog"]
