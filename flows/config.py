"""Typed flow parameters, checked up front so a bad option fails before any work: every count has an upper bound,
floats are finite, seeds fit 32 bits, and every input folder (``--parent``, ``--dataset``) is checked against its
manifest here, before a flow starts: an error is one line, never a flow's traceback. ``GenerateConfig`` and
``EvalConfig`` live here; ``RunConfig`` and the profiles in run_config.py, the shared pieces in config_checks.py
(both re-exported, so ``flywheel.flows.config`` names every config model).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from flywheel.flows.config_checks import (  # noqa: F401 (ParameterError, from_parameters, heldout_advice re-exported)
    BACKEND_HELP,
    MAX_ROWS,
    PREFIX_CACHE_HELP,
    Backend,
    ParameterError,
    check_parent,
    from_parameters,
    heldout_advice,
    no_credentials,
)
from flywheel.flows.run_config import (  # noqa: F401 (re-exported)
    FULL_PROFILE,
    FULL_TOOL_RECIPE,
    PROFILES,
    RunConfig,
    full_profile,
    load_profile,
    profile_values,
    stage_options,
)
from flywheel.schemas import Thresholds
from flywheel.schemas.records import MAX_SEED, folder_name
from flywheel.tasks.data.dedupe import MAX_NGRAM
from flywheel.tasks.data.seeds import SEEDS_DIR
from flywheel.verifiers.envs import env_names  # discovery only: no env is imported


class GenerateConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    env: str = Field(default="tool_call", description=f"Environment whose seeds to vary: {' | '.join(env_names())}.")
    n: int = Field(ge=1, le=MAX_ROWS, description="Accepted rows wanted (train + held-out).")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Run seed: every row seed derives from it.")
    out: str = Field(min_length=1, description="Output root: the version lands in OUT/NAME/VERSION/.")
    name: str | None = Field(default=None, description="Dataset name (default: ENV).")
    backend: Backend = Field(default="sampler", description="sampler | transformers | vllm | openai")
    model: str | None = Field(default=None, description="Checkpoint folder (transformers, vllm) or model name "
                              "(openai).")
    base_url: str | None = Field(default=None, description="openai backend: OpenAI-compatible base URL, e.g. "
                                 "http://127.0.0.1:8000/v1 (API key from $OPENAI_API_KEY).")
    workers: int = Field(default=2, ge=1, le=64, description="Dask LocalCluster workers (ignored with "
                         "--dask-address).")
    dask_address: str | None = Field(default=None, description="Scheduler address of a running Dask cluster.")
    heldout_fraction: float = Field(default=0.2, gt=0.0, lt=1.0, description="Share of rows held out, per tool.")
    threshold: float = Field(default=0.8, gt=0.0, le=1.0, description="Jaccard threshold of the near-duplicate stage.")
    ngram: int = Field(default=3, ge=1, le=max(MAX_NGRAM.values()))
    unit: Literal["word", "char"] = "word"
    max_tool_share: float = Field(default=0.25, gt=0.0, le=1.0, description="Quality gate: no tool may hold a larger "
                                  "share of the rows.")
    max_candidates: int | None = Field(default=None, ge=1, le=5 * MAX_ROWS + 100,
                                       description="Candidate budget (default 5*N+100).")
    partition_size: int = Field(default=5000, ge=1, le=1_000_000)
    parents: tuple[str, ...] = Field(default=(), description="Earlier published version folder(s) to dedupe against.")
    seeds_dir: str = Field(default=str(SEEDS_DIR), description="Folder with ENV.jsonl seeds and ENV.tools.json "
                           "(default: the env's own folder, verifiers/envs/ENV/).")
    cache_dir: str | None = Field(default=None, description="Stage cache (default OUT/.cache).")
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

    dataset: str = Field(min_length=1, description="A published dataset version folder (OUT/NAME/VERSION).")
    split: Literal["heldout", "train"] = Field(default="heldout", description="The split to evaluate: heldout | "
                                               "train.")
    out: str = Field(min_length=1, description="Output folder: report.json, report.md + PNG plots, "
                     "rollouts.parquet.")
    model: str | None = Field(default=None, description="Checkpoint or PEFT adapter folder (transformers, vllm) or "
                              "served model name (openai); default: the embedded SmolLM2-135M-Instruct.")
    backend: Literal["auto", "transformers", "vllm", "openai"] = Field(default="auto", description=BACKEND_HELP)
    base_url: str | None = Field(default=None, description="openai backend: base URL, e.g. "
                                 "http://127.0.0.1:8000/v1 (API key from $OPENAI_API_KEY).")
    _base_url = field_validator("base_url")(no_credentials)
    samples: int = Field(default=1, ge=1, le=256, description="Samples per task (k of pass@k).")
    limit: int | None = Field(default=None, ge=1, description="Evaluate only the first N tasks (ordered by task id).")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Run seed: every rollout's seed derives from it.")
    batch_size: int = Field(default=16, ge=1, le=4096, description="Rollouts per batch (the unit of resumption).")
    temperature: float = Field(default=0.7, ge=0.0, le=2.0, description="Sampling temperature (0: greedy).")
    top_p: float = Field(default=0.95, gt=0.0, le=1.0, description="Nucleus sampling: draw from the most likely "
                         "tokens whose probabilities sum to this.")
    max_tokens: int = Field(default=128, ge=1, le=8192, description="Max new tokens per reply (per step in agent "
                            "episodes).")
    max_steps: int = Field(default=6, ge=1, le=64, description="Agent episodes (workplace): max policy turns.")
    concurrency: int = Field(default=4, ge=1, le=256, description="openai backend: requests in flight.")
    native_tools: bool = Field(default=False, description="openai backend: send tools as OpenAI `tools` "
                               "(server-side parsing).")
    prefix_cache: bool = Field(default=True, description=PREFIX_CACHE_HELP)
    success_threshold: float = Field(default=1.0, gt=-1.0, le=1.0, description="A rollout succeeds when its reward "
                                     "reaches this.")
    thresholds: Thresholds = Thresholds()
    bootstrap: int = Field(default=1000, ge=100, le=100_000)
    price_in: float = Field(default=0.0, ge=0.0, description="Cost estimate: USD per 1M prompt tokens.")
    price_out: float = Field(default=0.0, ge=0.0, description="Cost estimate: USD per 1M completion tokens.")
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
