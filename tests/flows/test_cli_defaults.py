"""Each default and its help text are written once: CLI options and deployment entry flows agree with the config
models (flows/config.py, TrainConfig, GateConfig, Thresholds, NearDupParams, IngestConfig); a mismatch fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import typer.main
from pydantic import BaseModel, ValidationError

from flywheel.flows.cli import app
from flywheel.flows.config import EvalConfig, GenerateConfig, RunConfig
from flywheel.flows.deployments import generate_entry, pipeline_entry
from flywheel.flows.ingest import IngestConfig
from flywheel.schemas import Thresholds
from flywheel.tasks.release.gate import GateConfig
from flywheel.tasks.training.train import TrainConfig

MODELS: dict[str, tuple[type[BaseModel], ...]] = {
    "run": (RunConfig,), "generate": (GenerateConfig,), "eval": (EvalConfig, Thresholds), "train": (TrainConfig,),
    "promote": (GateConfig,), "ingest": (IngestConfig,),
}
# options built with flows.cli.base.option: help is the field's description
HELP_FROM_MODEL = ("eval", "generate", "ingest", "promote", "run", "train")
MODEL_DEFAULT_IF_NONE = {("generate", "seeds_dir")}  # an unset option leaves the model's default in place


def _plain(value: object) -> object:
    return str(value) if isinstance(value, Path) else value


def _commands() -> dict[str, object]:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", sorted(MODELS))
def test_cli_option_defaults_are_the_models(command: str) -> None:
    checked = 0
    for param in _commands()[command].params:
        model = next((m for m in MODELS[command] if param.name in m.model_fields), None)
        if model is None:
            continue
        info = model.model_fields[param.name]
        if info.is_required():
            assert param.required, f"{command} --{param.name}: required in {model.__name__}, optional in the CLI"
        elif (command, param.name) not in MODEL_DEFAULT_IF_NONE or param.default is not None:
            assert _plain(param.default) == _plain(info.default), \
                f"{command} --{param.name}: CLI default {param.default!r} != {model.__name__} {info.default!r}"
        if command in HELP_FROM_MODEL and info.description:
            assert param.help == info.description, f"{command} --{param.name}: help differs from the model's"
        checked += 1
    assert checked >= 3, f"{command}: no option matched a model field"


@pytest.mark.parametrize(("entry", "model"), [(pipeline_entry, RunConfig), (generate_entry, GenerateConfig)])
def test_deployment_entry_parameters_are_the_models_fields(entry, model) -> None:
    """Generated, not written again: one parameter per field, with its type (choices included) and description in
    the UI's schema; left out means the model's default (None here)."""
    schema = entry.parameters.model_dump()["properties"]
    assert list(schema) == list(model.model_fields)
    for name, info in model.model_fields.items():
        assert schema[name].get("description") == " ".join((info.description or name.replace("_", " ")).split())
        if not info.is_required() and name != "out":
            assert schema[name]["default"] is None or (entry, name) == (generate_entry, "n")
    assert generate_entry.parameters.model_dump()["properties"]["n"]["default"] == RunConfig.model_fields["n"].default
    assert "enum" in str(schema.get("curriculum", schema.get("unit")))  # a choice stays a choice in the form


def test_the_run_deployment_takes_every_option_flywheel_run_takes() -> None:
    """A scheduled run must be able to reproduce any CLI run: a new `flywheel run` option missing from the entry
    flow fails here (it happened to --grpo-replay-rows and --check-interval)."""
    cli = {p.name for p in _commands()["run"].params} - {"help"}
    entry = set(inspect.signature(pipeline_entry.fn).parameters)
    assert cli - entry == set(), f"flywheel-run deployment lacks {sorted(cli - entry)}"
    assert entry - cli == set(), f"flywheel-run deployment has parameters the CLI lacks: {sorted(entry - cli)}"


@pytest.mark.parametrize("params", [{"profile": "full"}, {"env": "workplace"}, {"env": "workplace", "profile": "full"},
                                    {"profile": "full", "grpo_replay_weight": 0.0, "refill": 0}, {}])
def test_the_run_deployment_builds_the_config_flywheel_run_builds(params, monkeypatch) -> None:
    """A parameter left out of a scheduled run is an option not given: the profile's and the env's presets apply as
    in `flywheel run` (an entry default of "mixed" once overrode the full profile's curriculum)."""
    import flywheel.flows.deployments as deployments

    # the entry runs the flywheel-run flow's body (a flow that lost its decorator has no .fn: this fails)
    assert deployments.run_pipeline.name == "flywheel-run"
    monkeypatch.setattr(deployments.run_pipeline, "fn", lambda config: config)
    assert pipeline_entry.fn(out="x", **params).model_dump() == RunConfig(out="x", **params).model_dump()


def test_the_run_deployment_refuses_a_bad_choice_before_any_work() -> None:
    from prefect.exceptions import ParameterTypeError

    with pytest.raises(ParameterTypeError, match="curriculum: Input should be 'mixed', 'failures' or 'both'"):
        pipeline_entry.validate_parameters({"out": "x", "curriculum": "al"})
    with pytest.raises(ParameterTypeError, match="grpo_replay_focus: Input should be 'all' or 'tools'"):
        pipeline_entry.validate_parameters({"out": "x", "grpo_replay_focus": "tool"})


def test_the_full_profile_sets_its_sizes_and_given_options_win() -> None:
    from flywheel.flows.config import FULL_PROFILE, FULL_TOOL_RECIPE, RunConfig

    full = RunConfig(profile="full")  # tool_call: the sizes and the GRPO recipe measured on it
    assert {k: getattr(full, k) for k in FULL_PROFILE | FULL_TOOL_RECIPE} == FULL_PROFILE | FULL_TOOL_RECIPE
    assert full.eval_limit >= 200 and full.curriculum == "both" and full.grpo_replay_focus == "tools"
    # GRPO: 24 updates of 8 prompts x 4 completions, checked every 12 (seeds 0-2: lower bound above 0 over SFT)
    assert (full.grpo_steps, full.grpo_prompts * full.num_generations, full.check_interval) == (24, 32, 12)
    # tool_call's gate reads 1,000 held-out tasks (enough to resolve GRPO's +0.01 over SFT), and half of its rows
    # are held out so that there are that many; the other envs keep 200 of a fifth (their evals cost more)
    assert full.eval_limit == 1000 and full.n * full.heldout_fraction >= full.eval_limit
    assert [(c.eval_limit, c.heldout_fraction) for c in (RunConfig(profile="full", env="math"), RunConfig())] \
        == [(200, 0.2), (48, 0.2)]
    assert RunConfig(profile="full", eval_limit=300, grpo_steps=2).model_dump(include={"eval_limit", "grpo_steps"}) \
        == {"eval_limit": 300, "grpo_steps": 2}
    assert RunConfig().eval_limit == 48 and RunConfig().grpo_learning_rate == 3e-5  # the default profile is untouched
    # a longer GRPO keeps the profile's number of checks (2 after the start), not its interval; a given one wins
    assert [RunConfig(profile="full", grpo_steps=s).check_interval for s in (2, 12, 24, 100)] == [4, 6, 12, 50]
    assert RunConfig(profile="full", grpo_steps=100, check_interval=1).check_interval == 1
    # a deployment's JSON may give the number as text: the same interval as the CLI's int, and a bad one still refused
    assert RunConfig(profile="full", grpo_steps="12").check_interval == 6
    assert RunConfig(profile="full", grpo_steps="12.0").check_interval == 6  # read as the field reads it
    with pytest.raises(ValidationError, match="grpo_steps"):
        RunConfig(profile="full", grpo_steps="twelve")
    assert RunConfig(grpo_steps=100).check_interval is None  # the default profile: half of --grpo-steps
    # --grpo-replay-weight 0 drops the profile's replay focus with it (instead of refusing a focus the user never gave)
    assert RunConfig(profile="full", grpo_replay_weight=0).grpo_replay_focus == "all"
    with pytest.raises(ValueError, match="--grpo-replay-weight above 0"):  # a focus given without replay still refuses
        RunConfig(profile="full", grpo_replay_weight=0, grpo_replay_focus="tools")
    for env in ("math", "cli", "code", "sql"):  # no tool catalog: the recipe (replay on GRPO's tools) cannot apply
        other = RunConfig(env=env, profile="full")
        assert {k: getattr(other, k) for k in FULL_PROFILE} == FULL_PROFILE, env
        assert (other.curriculum, other.grpo_replay_weight, other.grpo_replay_focus) == ("mixed", 0.0, "all"), env


def test_an_envs_own_choices_win_over_the_full_profile_and_its_sizes_are_raised(monkeypatch) -> None:
    import dataclasses

    import flywheel.verifiers.envs as envs
    from flywheel.flows.config import FULL_TOOL_RECIPE, full_profile

    spec = envs.get_env("tool_call")
    mine = {"grpo_learning_rate": 2e-4, "curriculum": "failures", "grpo_steps": 40, "curriculum_tasks": 7}
    monkeypatch.setattr(envs, "get_env", lambda name: dataclasses.replace(spec, run_defaults=mine))
    full = full_profile("tool_call")
    assert (full["grpo_learning_rate"], full["curriculum"]) == (2e-4, "failures")  # the env's choices
    assert (full["grpo_steps"], full["curriculum_tasks"]) == (40, FULL_TOOL_RECIPE["curriculum_tasks"])  # the max
    assert full["grpo_replay_focus"] == "tools"  # what the env leaves unset comes from the recipe


def test_an_envs_run_defaults_replace_the_tool_call_sizes_and_given_options_win() -> None:
    """`flywheel run --env workplace` takes the sizes an agent needs to learn (EnvSpec.run_defaults); options given
    on the command line still win, --profile full sets its own sizes over them, other envs keep RunConfig's."""
    from typer.testing import CliRunner

    from flywheel.flows.cli import app
    from flywheel.flows.config import FULL_PROFILE, RunConfig
    from flywheel.verifiers.envs import get_env

    preset = dict(get_env("workplace").run_defaults)
    assert preset["lora_targets"] == "all-linear" and preset["n"] > RunConfig().n
    wp = RunConfig(env="workplace")
    assert {k: getattr(wp, k) for k in preset} == preset
    assert RunConfig(env="workplace", n=60, lora_targets="attention").model_dump(include={"n", "lora_targets"}) \
        == {"n": 60, "lora_targets": "attention"}
    full = RunConfig(env="workplace", profile="full")  # never lowers the env's sizes, keeps its own choices
    assert {k: getattr(full, k) for k in FULL_PROFILE} == {k: max(v, preset[k]) if isinstance(v, int) and k in preset
                                                           else preset.get(k, v) for k, v in FULL_PROFILE.items()}
    assert full.lora_targets == "all-linear" and full.grpo_reward == "verifier" and full.curriculum == "mixed"
    assert full.sft_steps == preset["sft_steps"] > FULL_PROFILE["sft_steps"] and full.n == FULL_PROFILE["n"]
    assert RunConfig(env="math").model_dump() == RunConfig(env="math", **{k: RunConfig.model_fields[k].default
                                                                          for k in preset}).model_dump()
    # through the CLI: a bad value still fails in one line before any work, whatever the preset
    result = CliRunner().invoke(app, ["run", "--env", "workplace", "--n", "5", "--out", "x"])
    assert result.exit_code == 1 and "n" in result.output and "20" in result.output


def test_auto_rollouts_take_vllm_only_for_long_grpo_runs_where_it_is_installed(tmp_path, monkeypatch) -> None:
    import importlib.util

    from flywheel.flows.config import RunConfig
    from flywheel.flows.pipeline import speed_warning

    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("FLYWHEEL_VLLM_PYTHON", str(python))  # a .venv-vllm is there
    auto = {"grpo_rollout_backend": "auto"}
    assert RunConfig(profile="full", **auto).rollout_backend() == "vllm"  # 24 steps x 2 prompts x 8: 384 completions
    assert RunConfig(**auto).rollout_backend() == "transformers"  # the default run's few steps: the start loses
    assert RunConfig(env="workplace", **auto).rollout_backend() == "vllm"  # 4 x 8 agent episodes: vLLM wins early
    assert RunConfig(profile="full").rollout_backend() == "vllm"  # tool_call's full profile: auto (24 x 2 x 8)
    assert RunConfig(profile="full", env="math").rollout_backend() == "transformers"  # the field's default
    assert speed_warning(RunConfig(profile="full")) is None
    if importlib.util.find_spec("vllm") is None:  # vLLM lives in .venv-vllm, not here
        monkeypatch.setenv("FLYWHEEL_VLLM_PYTHON", str(tmp_path / "missing"))
        assert RunConfig(profile="full", **auto).rollout_backend() == "transformers"
        assert RunConfig(profile="full").rollout_backend() == "transformers"  # the full profile runs without vLLM
        assert "3 hours" in speed_warning(RunConfig(profile="full"))  # and says what that costs, up front
    assert speed_warning(RunConfig()) is None


def test_a_copied_profile_file_is_a_recipe_and_a_broken_one_fails_in_one_line(tmp_path) -> None:
    """Profiles are data (flows/profiles/*.yaml, one loader): a user's copy with one value changed runs that recipe;
    a file that is not one names what to fix."""
    from flywheel.flows.config import PROFILES

    mine = tmp_path / "mine.yaml"
    mine.write_text((PROFILES / "full.yaml").read_text().replace("grpo_steps: 24 ", "grpo_steps: 7 "))
    copied, full = RunConfig(profile=str(mine)), RunConfig(profile="full")
    assert copied.grpo_steps == 7 and copied.model_dump(exclude={"grpo_steps", "profile", "check_interval"}) == \
        full.model_dump(exclude={"grpo_steps", "profile", "check_interval"})
    for body, needle in [("all: [1]\n", "(not a mapping)"), ("extra:\n  n: 3\n", "not 'extra'"),
                         ("all:\n  out: x\n", "section all: out is not"), ("all: {n: [\n", "not readable YAML"),
                         ("all:\n  n: 5\n", "greater than or equal to 20"),
                         ("all:\n  " + "x" * 500 + ": 1\n", "x" * 80 + " is not"),
                         ("# " + "x" * 70_000 + "\nall: {}\n", "larger than 64 KB")]:
        mine.write_text(body)
        with pytest.raises(ValueError, match=re.escape(needle)):
            RunConfig(profile=str(mine))
    with pytest.raises(ValueError, match="choose one of default, full"):
        RunConfig(profile=str(tmp_path / "missing.yaml"))
