"""Typed flow parameters, checked up front so a bad option fails before any work."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks.seeds import SEEDS_DIR

Backend = Literal["sampler", "transformers", "vllm", "openai"]


class GenerateConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    env: str = "tool_call"
    n: int = Field(ge=1, description="accepted rows wanted")
    seed: int = Field(default=0, ge=0, description="run seed: every row seed derives from it")
    out: str = Field(min_length=1, description="root folder; the version lands in OUT/<name>/<version>/")
    name: str | None = None
    backend: Backend = "sampler"
    model: str | None = None
    base_url: str | None = None
    workers: int = Field(default=2, ge=1, le=64)
    dask_address: str | None = None
    heldout_fraction: float = Field(default=0.2, gt=0.0, lt=1.0)
    threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    ngram: int = Field(default=3, ge=1)
    unit: Literal["word", "char"] = "word"
    max_tool_share: float = Field(default=0.25, gt=0.0, le=1.0)
    max_candidates: int | None = Field(default=None, ge=1)
    partition_size: int = Field(default=5000, ge=1)
    parents: tuple[str, ...] = ()
    seeds_dir: str = str(SEEDS_DIR)
    cache_dir: str | None = None

    @model_validator(mode="after")
    def _check(self) -> GenerateConfig:
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ValueError("backend 'openai' needs --base-url (e.g. http://127.0.0.1:8000/v1) and --model")
        if self.backend == "sampler" and self.model:
            raise ValueError("--model only applies to the transformers, vllm and openai backends")
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
