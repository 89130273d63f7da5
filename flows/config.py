"""Typed flow parameters, checked up front so a bad option fails before any work.

Every count has an upper bound (a typo such as ``--n 100000000000`` is refused with the limit, instead of running
until the machine runs out of memory), floats must be finite, seeds fit the 32 bits numpy and torch seed with,
and every input folder (``--parent``) is read and checked against its manifest here, before a flow starts: an
error is one line, never a flow's traceback.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from flywheel.schemas import Thresholds
from flywheel.schemas.records import MAX_SEED, folder_name
from flywheel.tasks.data.dedupe import MAX_NGRAM
from flywheel.tasks.data.seeds import SEEDS_DIR
from flywheel.tasks.training.replay import FOCUS_HELP
from flywheel.tasks.training.rewards import REWARD_HELP, RewardKind

Backend = Literal["sampler", "transformers", "vllm", "openai"]
# flywheel run's choices, one definition for RunConfig and the flywheel-run deployment's parameters
Profile = Literal["default", "full"]
LoraTargets = Literal["attention", "all-linear"]
Curriculum = Literal["mixed", "failures", "both"]
ReplayFocus = Literal["all", "tools"]
RunBackend = Literal["auto", "transformers", "vllm"]
ConfigT = TypeVar("ConfigT", bound=BaseModel)
MAX_ROWS = 10_000_000  # generate --n: 100x the 100k-row bench flow
BACKEND_HELP = ("auto: vllm when it is installed (.venv-vllm or importable) and the eval has at least 100 rollouts, "
                "else transformers | transformers | vllm (an adapter is served merged into its base) | openai")
PREFIX_CACHE_HELP = ("transformers backend: prefill a prompt prefix shared by several requests once and reuse its KV "
                     "cache (and an agent's from step to step); GRPO's updates run the prompt prefix a pass shares "
                     "once; --no-prefix-cache prefills every prompt whole (the old paths, for comparison).")


def no_credentials(url: str | None) -> str | None:
    """``url`` when it holds no user or password: the URL is recorded in manifests and eval reports (and shown in
    the UI's artifacts); the key goes in $OPENAI_API_KEY."""
    parts = urlsplit(url or "")
    if parts.username is not None or parts.password is not None:
        raise ValueError("--base-url must not hold a user or password (it is written into manifests and reports): "
                         "pass the key as $OPENAI_API_KEY")
    return url


def check_parent(folder: str, env: str) -> None:
    """A --parent must be a published version of ``env`` that passes ``check_version`` (files against its manifest,
    the manifest against its folder, every row's id, env, prompt and task JSON; prompts at most dedupe's cap)."""
    from flywheel.tasks.data.publish import check_version

    try:
        manifest = check_version(Path(folder))
    except (ValueError, OSError) as exc:
        raise ValueError(f"--parent {folder}: {' '.join(str(exc).split())}") from None
    if manifest.env != env:
        raise ValueError(f"--parent {folder} is a {manifest.env} dataset, not {env}: dedupe against versions of the "
                         f"--env generated ({env})")


class ParameterError(ValueError):
    """A deployment run's parameter failed its config's validation; the message, one line, names it."""


def parameter_error(exc: ValidationError) -> str:
    """One line for a config's ValidationError: the parameter, pydantic's message and the value given (a model
    validator's message names its options itself), never pydantic's multi-line dump with a docs link."""
    errors = exc.errors()
    e, more = errors[0], f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    msg = " ".join(str(e["msg"]).removeprefix("Value error, ").split())
    if not e["loc"]:
        return f"{msg}{more}: change the run's parameters"
    got = "" if isinstance(e.get("input"), dict) else f", got {' '.join(repr(e.get('input'))[:80].split())}"
    return f"parameter {'.'.join(map(str, e['loc']))}: {msg}{got}{more}: change it in the run's parameters"


def from_parameters(model: type[ConfigT], /, **params: Any) -> ConfigT:
    """``model(**params)`` for a deployment entry flow (flows/deployments.py): the Prefect UI's Run and schedules
    skip the CLI, whose ``explain`` makes a ValidationError one line; here it is a ParameterError of one line."""
    try:
        return model(**params)
    except ValidationError as exc:
        raise ParameterError(parameter_error(exc)) from None


def rows_per_tool(heldout_fraction: float) -> int:
    """The fewest rows a tool needs for the split to hold one of them out (``tasks/data/split.py``: a tool's groups
    go to held-out while they fill at most its share, a row counting from half of it, and its last group stays in
    train)."""
    return max(2, math.ceil(0.5 / heldout_fraction - 1e-9))


def heldout_advice(rows: int, heldout_fraction: float) -> str:
    return (f"{rows} rows at --heldout-fraction {heldout_fraction:g} (the split holds rows out per tool, and a tool "
            f"needs at least {rows_per_tool(heldout_fraction)} rows for one to be held out): raise --n or "
            "--heldout-fraction")


class GenerateConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    env: str = "tool_call"
    n: int = Field(ge=1, le=MAX_ROWS, description="accepted rows wanted")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="run seed: every row seed derives from it")
    out: str = Field(min_length=1, description="root folder; the version lands in OUT/<name>/<version>/")
    name: str | None = None
    backend: Backend = "sampler"
    model: str | None = None
    base_url: str | None = None
    workers: int = Field(default=2, ge=1, le=64)
    dask_address: str | None = None
    heldout_fraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    ngram: int = Field(default=3, ge=1, le=max(MAX_NGRAM.values()))
    unit: Literal["word", "char"] = "word"
    max_tool_share: float = Field(default=0.25, gt=0.0, le=1.0)
    max_candidates: int | None = Field(default=None, ge=1, le=5 * MAX_ROWS + 100)
    partition_size: int = Field(default=5000, ge=1, le=1_000_000)
    parents: tuple[str, ...] = ()
    seeds_dir: str = str(SEEDS_DIR)
    cache_dir: str | None = None
    min_heldout: int = Field(default=0, ge=0, le=MAX_ROWS, description="fail before publishing when the held-out "
                             "split has fewer tasks (flywheel run: 1, its evals read held-out)")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str | None) -> str | None:
        return None if name is None else folder_name(name)  # the version lands in OUT/<name>/

    _base_url = field_validator("base_url")(no_credentials)

    @model_validator(mode="after")
    def _check(self) -> GenerateConfig:
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ValueError("backend 'openai' needs --base-url (e.g. http://127.0.0.1:8000/v1) and --model")
        if self.backend == "sampler" and self.model:
            raise ValueError("--model only applies to the transformers, vllm and openai backends")
        if self.ngram > MAX_NGRAM[self.unit]:
            raise ValueError(f"ngram must be at most {MAX_NGRAM[self.unit]} for unit {self.unit!r}, got {self.ngram}")
        for parent in self.parents:
            if not (Path(parent) / "manifest.json").is_file():
                raise ValueError(f"--parent {parent} is not a published version folder (no manifest.json)")
            check_parent(parent, self.env)
        return self

    @property
    def dataset_name(self) -> str:
        return self.name or self.env

    @property
    def candidate_budget(self) -> int:
        return self.max_candidates or 5 * self.n + 100

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else Path(self.out) / ".cache"


class EvalConfig(BaseModel):
    """``flywheel eval``: a policy on one split of a published dataset version."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dataset: str = Field(min_length=1, description="a published version folder (has manifest.json)")
    split: Literal["heldout", "train"] = "heldout"
    out: str = Field(min_length=1)
    model: str | None = None  # checkpoint or adapter folder, or served model name (openai); None: embedded
    backend: Literal["auto", "transformers", "vllm", "openai"] = Field(default="auto", description=BACKEND_HELP)
    base_url: str | None = None
    _base_url = field_validator("base_url")(no_credentials)
    samples: int = Field(default=1, ge=1, le=256)
    limit: int | None = Field(default=None, ge=1)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    batch_size: int = Field(default=16, ge=1, le=4096)
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    max_tokens: int = Field(default=128, ge=1, le=8192)
    max_steps: int = Field(default=6, ge=1, le=64)
    concurrency: int = Field(default=4, ge=1, le=256)
    native_tools: bool = False
    prefix_cache: bool = Field(default=True, description=PREFIX_CACHE_HELP)
    success_threshold: float = Field(default=1.0, gt=-1.0, le=1.0)
    thresholds: Thresholds = Thresholds()
    bootstrap: int = Field(default=1000, ge=100, le=100_000)
    price_in: float = Field(default=0.0, ge=0.0, description="USD per 1M prompt tokens")
    price_out: float = Field(default=0.0, ge=0.0, description="USD per 1M completion tokens")
    reuse: tuple[str, ...] = Field(default=(), description="earlier eval folders: a finished batch there that this "
                                   "eval would write (its name hashes the dataset, model weights, sampling, seeds, "
                                   "verifiers and code) is copied, not run again")

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ValueError("backend 'openai' needs --base-url (e.g. http://127.0.0.1:8000/v1) and --model")
        if self.backend != "openai" and self.base_url:
            raise ValueError("--base-url only applies to --backend openai")
        if self.samples > 1 and self.temperature == 0:
            raise ValueError("--samples > 1 needs --temperature > 0: greedy samples are all the same")
        if not (Path(self.dataset) / "manifest.json").is_file():
            raise ValueError(f"--dataset {self.dataset} is not a published version folder (no manifest.json); "
                             "pass OUT/NAME/VERSION as printed by `flywheel generate`")
        return self


# under an hour on 2 cores: SFT 232 steps (1.1 epochs of the 828 train rows left; held-out 0.965), GRPO 32 steps x 2
# prompts on the curriculum's mixed tasks. Less SFT to leave GRPO more to win did not pay: from 0.55 epoch (0.805)
# GRPO lost 0.060 at lr 1e-4 and 0.030 at 3e-5. 128 validation tasks: a 32-task slice read the same at every check
# while held-out lost 2-10 tasks of 200; 128 saw GRPO's breakage (0.961 -> 0.906) and kept the start (RESULTS.md)
FULL_PROFILE = {"n": 1200, "eval_limit": 200, "sft_steps": 232, "grpo_steps": 32, "grpo_prompts": 2,
                "grpo_learning_rate": 1e-4, "curriculum_tasks": 128, "validation_tasks": 128, "capability_tasks": 32}
# ... and for single-turn envs with a tool catalog (tool_call), the GRPO recipe that added over SFT (RESULTS.md, X10
# and `flywheel_run_full_both/`: +0.020 [+0.005, +0.040]): the greedy failures and the mixed tasks of the train
# tasks sampled (both sides of a decision: failures alone always broke its mirror image), replay
# of 32 reference answers calling GRPO's tools at weight 8, lr 5e-5, checks (then every 2 steps), vLLM rollouts where
# installed. Measured on tool_call only, so the other envs keep the sizes above. Its gain over full SFT is about
# +0.01 with 1.5% of tasks changing either way: 200 held-out tasks cannot tell it from 0 (four runs of five read a
# lower bound <= 0), 1,000 tasks SFT and GRPO never saw could (+0.009 [+0.002, +0.017], RESULTS.md). So half of
# 2,000 rows is held out (the train side keeps the ~870 rows SFT's 232 steps were sized for) and every eval reads
# 1,000 of them: 3.4 minutes more on a slow VM (63:16; seed 0 read +0.000 [-0.009, +0.010], 12 fixed, 12 broken).
# GRPO takes 4 prompts a step for 12 steps (the same 48 prompts as 24 x 2, about the same time): each update sees both
# sides of more decisions. From one SFT adapter (0.953) two draws read +0.010 [+0.001, +0.019] (step 12 of 24) and
# +0.008 [+0.002, +0.014] (this recipe, seed 1, step 4), a third -0.013 [-0.021, -0.005] (seed 2: the pick against SFT
# catches it unless SFT fails the gate, and selection's margin score now reads it below the start); 24 x 2 read +0.000
# and -0.001 from an SFT of 0.955 (RESULTS.md, "... 12 steps", "A smooth validation score"). The hour on the slow VMs:
# the curriculum samples the first 400 train tasks (~100 picked; GRPO's 48 prompts and their redraws use ~56), not all
# ~870, and the 128-task checks (~2 min each with the margin score there) run every 4 steps, not 2: in all five 12 x 4
# runs measured every 2 steps the checkpoint kept was 0, 4 or 12 (RESULTS.md, "The hour on the slow VMs").
# Then 4 completions for each of 8 prompts (the same 32 a step and the same time; each update sees twice as many
# decisions) on picks balanced by decision (--curriculum-balance: 113 -> 88; every seed-0 draw before broke
# crm.find_contact, 6 picks by name against 3 by company): from seed 0's SFT on AMD Zen 4, +0.006 [-0.001, +0.014],
# 10 fixed / 4 broken, against -0.002 [-0.012, +0.008] for 8 x 4 on all picks (RESULTS.md, forty-ninth session).
# 24 of those steps, not 12 (lr 5e-5 decaying over 24; checks every 12, not 8: the checks do not move training, the
# same step-4 adapter byte for byte checked every 2 or every 4 steps, and all three seeds kept step 24 anyway, so one
# check less saves ~1 min of the hour; RESULTS.md, fifty-fifth session): from the full SFT all three seeds read a lower
# bound above 0 where 12 steps never did (seed 0: 0.941 -> 0.956, +0.015 [+0.006, +0.025]; seed 1: 0.946 -> 0.969,
# +0.023 [+0.013, +0.034]; seed 2: 0.948 -> 0.975, +0.027 [+0.016, +0.038]; 12 steps: +0.003 and +0.005), in 58-61
# minutes on a 2-core Intel Xeon without AMX (RESULTS.md, "24 GRPO steps from full SFT"), 67 on the slower AMD EPYC.
# Since each update pass is one prompt's group (shared_prefix.shuffle_groups), 52-54 minutes on that AMD class with
# the same gains (seed 0: +0.016 [+0.007, +0.026]; seed 2: +0.025 [+0.014, +0.036]; RESULTS.md, fifty-ninth session).
FULL_TOOL_RECIPE = {"n": 2000, "heldout_fraction": 0.5, "eval_limit": 1000, "grpo_steps": 24, "grpo_prompts": 8,
                    "num_generations": 4, "curriculum_balance": True,
                    "grpo_learning_rate": 5e-5, "curriculum": "both", "curriculum_tasks": 400, "grpo_replay": 8.0,
                    "grpo_replay_rows": 32, "grpo_replay_focus": "tools", "check_interval": 12,
                    "grpo_rollout_backend": "auto"}


def full_profile(env: str) -> dict[str, Any]:
    """``--profile full``'s values for ``env``: FULL_PROFILE, with FULL_TOOL_RECIPE for single-turn tool envs; an
    env's own ``run_defaults`` win where they are larger sizes or choices of its own (workplace's lr and reward)."""
    from flywheel.verifiers.envs import get_env

    spec = get_env(env)
    full = {**FULL_PROFILE, **(FULL_TOOL_RECIPE if spec.tools_path and not spec.multi_turn else {})}
    preset = dict(spec.run_defaults)
    return {k: max(v, preset[k]) if isinstance(v, int) and isinstance(preset.get(k), int) else preset.get(k, v)
            for k, v in full.items()}


class RunConfig(BaseModel):
    """``flywheel run``: sizes chosen so the whole tool_call loop fits in about 13 minutes on 2 CPU cores (32 on the
    slowest VMs); an env's ``run_defaults`` (``EnvSpec``) replace them for that env, and ``profile="full"`` raises
    them to the sizes of ``FULL_PROFILE`` (more SFT, GRPO and at least 200 held-out tasks per eval) where smaller,
    with ``FULL_TOOL_RECIPE`` for tool_call (``full_profile``); options given win."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    profile: Profile = Field(default="default", description="default: the loop in 13-32 "
                             "minutes on 2 cores; full: under an hour with vLLM installed (52-54 minutes on a "
                             "2-core AMD EPYC, measured; the Intel Xeon class took 58-61 before GRPO's updates "
                             "were cut by a third), at least 200 "
                             "held-out tasks per eval (tool_call: 1,000), more SFT and GRPO, and for tool_call "
                             "the GRPO recipe that beat SFT (README; options given still win).")

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
    # 60 steps (1 epoch of tool_call's 240 train rows) left a model that deleted the wrong file in 1 of 48 held-out
    # tasks once tool_call 1.3 called that unsafe, and the gate rejected the README's main job; 100 steps: 0.750, no
    # unsafe call, gate passed; seed 1 gains too (0.479 -> 0.667) but one unsafe call in 48 rejects it
    # (bench/RESULTS.md, "The default run at 100 SFT steps")
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
    grpo_replay: float = Field(default=0.0, ge=0.0, le=100.0, description="GRPO: weight of an SFT loss on reference "
                               "answers of every train task added to each update (0: none), so GRPO keeps what SFT "
                               "taught on the tasks the curriculum leaves out.")
    grpo_replay_focus: ReplayFocus = Field(default="all", description=FOCUS_HELP)
    grpo_replay_rows: int = Field(default=16, ge=1, le=4096, description="GRPO replay: reference answers per step.")
    check_interval: int | None = Field(default=None, ge=1, le=100_000, description="GRPO: steps between checks on "
                                       "the validation slice (default: half of --grpo-steps; --profile full for "
                                       "tool_call: 2 checks after the start, at least 4 steps apart); a 128-task "
                                       "check on vLLM rollouts takes 7-85 s (greedy; 72-85 s on the slowest VM) plus "
                                       "35-45 s there (the margin score).")
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
        """Options not given come from the env's ``run_defaults``, then the fields; with --profile full, from
        ``full_profile(env)`` first, which raises the env's sizes (workplace's SFT needs more steps than tool_call's
        full profile) and keeps its other choices."""
        if not isinstance(data, dict):
            return data
        from flywheel.verifiers.envs import env_names, get_env

        env = data.get("env", cls.model_fields["env"].default)
        known = isinstance(env, str) and env in env_names()
        preset = dict(get_env(env).run_defaults) if known else {}
        full = full_profile(env) if known and data.get("profile") == "full" else {}
        merged = {**preset, **full, **data}
        steps = data.get("grpo_steps")  # --grpo-steps alone: 2 checks as at 24 steps (every 12), at most 1 in 4
        if "check_interval" in full and steps is not None and "check_interval" not in data:
            try:  # "12" or "12.0" from a deployment's JSON read as the field reads them; a bad one: the field's error
                merged["check_interval"] = max(4, TypeAdapter(int).validate_python(steps) // 2)
            except ValidationError:
                pass
        if not merged.get("grpo_replay") and "grpo_replay_focus" not in data:
            merged.pop("grpo_replay_focus", None)  # --grpo-replay 0 given: the profile's focus goes with its replay
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
        if self.grpo_replay_focus != "all" and not self.grpo_replay:
            raise ValueError(f"--grpo-replay-focus {self.grpo_replay_focus} chooses what GRPO replays: give "
                             "--grpo-replay above 0 too (or drop --grpo-replay-focus)")
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


def field_default(model: type[BaseModel], name: str) -> Any:
    """The default of a config field: entry flows (flows/deployments.py) and CLI options take theirs from here."""
    return model.model_fields[name].default
