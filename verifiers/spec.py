"""The environment spec: everything the rest of the code asks about an env, in one frozen record.

Contract: an env lives in ``verifiers/envs/NAME/`` whose ``__init__.py`` defines ``SPEC = EnvSpec(...)``;
``flywheel.verifiers.envs.get_env(NAME)`` returns it. Nothing outside the env's folder branches on its name:
callers ask the spec (prompt, verifier, reward function, renderer, reference, stratum, outcome flags, multi-turn,
paths). The hooks and their signatures are listed on :class:`EnvSpec`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from flywheel.schemas import Message, Reference, SeedTask, Task, TaskMeta, ToolSpec, Verdict
from flywheel.schemas.seeds import placeholders

Renderer = Callable[[SeedTask, Mapping[str, ToolSpec], str, dict[str, Any], TaskMeta], Task]
ReferenceBuilder = Callable[[SeedTask, Mapping[str, ToolSpec], dict[str, Any]], Reference]
SEED_FIELDS = ("call", "calls", "answer", "entry_point", "inputs", "state")


def _no_problem(task: Task) -> tuple[str, str] | None:
    return None


def _no_flags(verdict: Verdict, called: frozenset[str], expected: frozenset[str]) -> dict[str, Any]:
    return {}


def category_stratum(seed: SeedTask) -> str:
    return seed.category


def task_category(task: Task) -> str:
    return task.meta.category


def category_strata(seeds: Sequence[SeedTask], tools: Mapping[str, ToolSpec]) -> tuple[str, ...]:
    return tuple(sorted({s.category for s in seeds}))


def renderer(system_prompt: str, reference: ReferenceBuilder) -> Renderer:
    """The usual renderer: system prompt + request as messages, the seed's tools,
    ``reference(seed, tools, values)``."""
    def render(seed: SeedTask, tools: Mapping[str, ToolSpec], request: str, values: dict[str, Any],
               meta: TaskMeta) -> Task:
        messages = (Message(role="system", content=system_prompt), Message(role="user", content=request))
        return Task(env=seed.env, messages=messages, tools=tuple(tools[name] for name in seed.tools),
                    reference=reference(seed, tools, values), meta=meta)
    return render


@dataclass(frozen=True)
class EnvSpec:
    """One environment.

    Hooks and their signatures:
    - ``verify(task, completion) -> Verdict``; ``reward_fn(completions, task, **kw) -> list[float | None]``: the
      env's reward function in TRL's form, which GRPO passes to TRL as its one ``reward_funcs`` entry (keywords: the
      rollout's ``verdict`` objects, ``reward_kind``, ``success_threshold``, ``log_metric``; see
      ``verifiers/common.py: batch_rewards``);
      ``verifier`` the verifier module (``NAME``, ``VERSION``, ``verify``, ``NAME_reward``) ``get_verifier`` returns.
    - ``render(seed, tools, request, values, meta) -> Task``: a pure function of its arguments (see :func:`renderer`).
    - ``reference_completion(task) -> str``: what a perfect policy answers.
    - ``reference_problem(task) -> (reason, detail) | None``: env-specific structural checks of a task's reference;
      :meth:`EnvSpec.check_reference` adds the generic one (the reference completion must score 1.0).
    - ``stratum(seed) -> str`` and ``task_stratum(task) -> str``: what the split and the quality suite balance on;
      ``strata(seeds, tools) -> tuple[str, ...]``: every stratum the quality suite expects.
    - ``outcome_flags(verdict, tools_called, tools_expected) -> dict``: env-specific eval flags (correct_tool,
      correct_args, execution_success) on top of the generic ones in ``tasks/evaluation/metrics.py``.
    - Seeds: ``seed_model`` (a SeedTask subclass may add fields), ``seed_fields`` (exactly the reference fields a seed
      gives), ``hidden_slots`` (templates may leave slots unnamed: ids, state, test inputs); :meth:`check_seed`.
    - ``resources_server(**limits) -> ASGI app``: the env as an HTTP resources server (``flywheel serve-env``); None
      when the env has none. ``ingest``: production trajectories of the env can be ingested.
    - ``replay_reference(task) -> Reference``: a multi-turn env's reference completed from its calls and initial state
      (the golden final state, by replaying the calls in a fresh session); ValueError saying why when it cannot.
    - ``run_defaults``: ``flywheel run`` options this env needs instead of RunConfig's defaults (e.g. more train
      tasks and LoRA on every linear layer for multi-step agents); the options a user gives still win.
    - Paths: ``seeds_path`` (seeds.jsonl), ``tools_path`` (tools.json; None when the env has no catalog),
      ``cases_path`` (golden verifier cases).
    """

    name: str
    system_prompt: str
    verifier: ModuleType
    verify: Callable[[Task, str], Verdict]
    reward_fn: Callable[..., list[float | None]]
    render: Renderer
    reference_completion: Callable[[Task], str]
    seeds_path: Path
    cases_path: Path
    tools_path: Path | None = None
    multi_turn: bool = False
    reference_problem: Callable[[Task], tuple[str, str] | None] = _no_problem
    stratum: Callable[[SeedTask], str] = category_stratum
    task_stratum: Callable[[Task], str] = task_category
    strata: Callable[[Sequence[SeedTask], Mapping[str, ToolSpec]], tuple[str, ...]] = category_strata
    outcome_flags: Callable[[Verdict, frozenset[str], frozenset[str]], dict[str, Any]] = _no_flags
    seed_model: type[SeedTask] = SeedTask
    seed_fields: frozenset[str] = frozenset({"answer"})
    hidden_slots: bool = False
    ingest: bool = False  # production trajectories of this env can be ingested
    resources_server: Callable[..., Any] | None = None  # (**limits) -> ASGI app serving the env (serve-env)
    replay_reference: Callable[[Task], Reference] | None = None  # multi-turn: the golden final state from the calls
    # flywheel run's sizes for this env where RunConfig's defaults (sized for single-turn tool calls) do not let it
    # learn: applied under every --profile, options given still win (flows/config.py: RunConfig)
    run_defaults: Mapping[str, Any] = field(default_factory=dict)

    def check_seed(self, seed: SeedTask) -> None:
        """Raise ValueError when the seed breaks this env's rules (slots named, exactly ``seed_fields`` given)."""
        if not self.hidden_slots:
            for template in seed.templates:
                if placeholders(template) != set(seed.slots):
                    raise ValueError(f"template {template!r} must use exactly the slots {sorted(seed.slots)}")
        given = {k for k in SEED_FIELDS if getattr(seed, k, None)}
        if given != set(self.seed_fields):
            raise ValueError(f"{self.name} seeds give exactly {sorted(self.seed_fields)}; "
                             f"this one gives {sorted(given)}")

    def check_reference(self, task: Task) -> tuple[str, str] | None:
        """None when the task's reference is usable, else (reason, detail): the env's structural checks, then the
        reference completion must score 1.0 under the verifier."""
        problem = self.reference_problem(task)
        if problem is not None:
            return problem
        verdict = self.verify(task, self.reference_completion(task))
        if verdict.reward != 1.0:
            return "reference_not_full_reward", (f"reward {verdict.reward} ({verdict.failure_class}): "
                                                 f"{verdict.details}")[:300]
        return None
