"""Multi-turn training on workplace (tasks/training/episodes.py): SFT rows, their loss mask and the labels TRL builds
from it, the check that a gold trajectory still scores 1.0, GRPO episodes (isolated sessions, hostile replies), and a
GRPO run through the CLI killed and resumed. `flywheel run --env workplace`, as the gpu-pool deployment, is in
tests/flows/test_operations.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from flywheel.schemas import Task
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools
from flywheel.tasks.training.episodes import DONE, gold_episode, sft_row
from flywheel.tasks.training.train import checkpoint_complete


def _tasks(n: int) -> list[Task]:
    seeds_path, tools_path = env_paths("workplace")
    tools = load_tools(tools_path)
    rows, _ = generate_candidates(range(n), load_seeds(seeds_path, tools), tools, 5)
    return [Task.model_validate_json(r["task"]) for r in rows]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from flywheel.tasks.inference.models import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model(None)))


def test_the_loss_mask_covers_the_assistant_turns_and_nothing_else(tokenizer) -> None:
    for task in _tasks(6):
        row = sft_row(tokenizer, task)
        ids, mask = row["input_ids"], row["assistant_masks"]
        assert len(ids) == len(mask) and set(mask) == {0, 1}
        calls = [json.dumps({"tool": c.tool, "args": c.args}) for c in task.reference.calls]
        turns = [c + "<|im_end|>" for c in calls] + [DONE + "<|im_end|>"]
        # the masked tokens, run by run, are exactly the assistant turns: the calls, the answer, their end tokens
        runs, current = [], []
        for token, bit in zip(ids, mask):
            if bit:
                current.append(token)
            elif current:
                runs.append(current)
                current = []
        assert [tokenizer.decode(r) for r in runs + ([current] if current else [])] == turns
        # and every token outside them is prompt, observation or template: no assistant text unmasked
        unmasked = tokenizer.decode([t for t, bit in zip(ids, mask) if not bit])
        assert unmasked.count("Result of ") == len(calls) and not any(c in unmasked for c in calls)
        assert unmasked.startswith("<|im_start|>system\n") and task.messages[-1].content in unmasked
        # rendered exactly as the agent loop renders the episode (the chat template over as_text_chat)
        episode = gold_episode(task)
        assert episode.verdict.reward == 1.0 and episode.stop_reason == "answer"


def test_a_gold_trajectory_that_no_longer_scores_fails_naming_the_task(tokenizer) -> None:
    task = _tasks(1)[0]
    stale = task.model_copy(update={"reference": task.reference.model_copy(
        update={"calls": task.reference.calls[:-1]})})  # the last gold call lost: the final state is not reached
    with pytest.raises(ValueError, match=f"workplace task {stale.id}: its gold trajectory .* not 1.0"):
        sft_row(tokenizer, stale)


def test_trl_builds_the_labels_from_the_mask(workplace_dataset, tmp_path, tokenizer) -> None:
    """The SFT trainer's rows: -100 on the prompt and the observations, the token elsewhere."""
    from flywheel.tasks.inference.models import load_causal_lm, resolve_model
    from flywheel.tasks.training.train import TrainConfig, _trainer, load_tasks

    config = TrainConfig(dataset=workplace_dataset, out=str(tmp_path / "labels"), method="sft", train_limit=2)
    model, _ = load_causal_lm(resolve_model(None))
    tasks = load_tasks(config, "train")
    trainer = _trainer(config, model, tokenizer, tasks, {"output_dir": str(tmp_path / "c"), "use_cpu": True,
                                                         "report_to": []}, [], None)
    for row, task in zip(trainer.train_dataset, tasks):
        expected = sft_row(tokenizer, task)
        assert row["input_ids"] == expected["input_ids"]
        assert row["labels"] == [t if m else -100 for t, m in zip(expected["input_ids"], expected["assistant_masks"])]


class Scripted:
    """The model's place in ``token_episode`` (encode, generate_ids, tokenizer) answering scripted replies, so the
    test decides what each episode does; the sessions, environment and verifier are the real ones."""

    def __init__(self, tokenizer, replies: list[str]) -> None:
        self.tokenizer, self.replies = tokenizer, list(replies)

    def encode(self, conversations):
        return [self.tokenizer.apply_chat_template(list(c), tokenize=True, add_generation_prompt=True)["input_ids"]
                for c in conversations]

    def generate_ids(self, prompts, seed, temperature, top_p, max_new_tokens):
        text = self.replies.pop(0) if self.replies else DONE
        return [self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]]


def test_the_g_episodes_of_a_prompt_never_share_a_session(tokenizer) -> None:
    """Episode A does the gold calls, episode B of the same task answers at once: B is scored on its own (untouched)
    session, so its reward is not A's, in either order; A's observations are masked out of the loss."""
    from flywheel.tasks.training.episodes import token_episode

    task = next(t for t in _tasks(8) if len(t.reference.calls) >= 2)
    gold = [json.dumps({"tool": c.tool, "args": c.args}) for c in task.reference.calls]
    run = [token_episode(Scripted(tokenizer, gold if who == "A" else []), task, 0, 1.0, 1.0, 64, 6)
           for who in ("A", "B", "A")]
    a, b, a_again = (r["episode"] for r in run)
    assert a["reward"] == 1.0 and a_again["reward"] == 1.0 and a["calls"] == len(gold)
    assert b["calls"] == 0 and b["reward"] is not None and b["reward"] < 1.0  # untouched by A's calls
    ids, mask = run[0]["completion_ids"], run[0]["env_mask"]
    assert len(ids) == len(mask)
    generated = tokenizer.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=True)
    observed = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    assert generated == "".join(gold) + DONE
    assert observed.count("Result of ") == len(gold) and not any(g in observed for g in gold)


class ScriptedRows(Scripted):
    """A lockstep batch: row i of every generate_ids call answers from script i (then DONE); records batch sizes."""

    def __init__(self, tokenizer, scripts: list[list[str]]) -> None:
        super().__init__(tokenizer, [])
        self.scripts, self.sizes, self.rows = [list(s) for s in scripts], [], None

    def generate_ids(self, prompts, seed, temperature, top_p, max_new_tokens):
        self.sizes.append(len(prompts))
        if self.rows is None:
            self.rows = list(range(len(prompts)))
        # the episodes under way, in order: those whose script still has a reply, or that still owe their DONE
        live = [i for i in self.rows if self.scripts[i] is not None]
        out = []
        for i in live:
            text = self.scripts[i].pop(0) if self.scripts[i] else DONE
            if text == DONE:
                self.scripts[i] = None
            out.append(self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id])
        return out


def test_the_g_episodes_of_one_lockstep_batch_never_share_a_session(tokenizer) -> None:
    """The G episodes of a prompt generate together, one batch per step: episode 0 does the gold calls (one of
    them destructive if replayed on a shared state), episodes 1 and 2 answer at once. Each is scored on its own
    session: 0 solves the task, 1 and 2 are untouched; the batch shrinks as episodes end."""
    from flywheel.tasks.training.episodes import token_episodes

    task = next(t for t in _tasks(8) if len(t.reference.calls) >= 2)
    gold = [json.dumps({"tool": c.tool, "args": c.args}) for c in task.reference.calls]
    policy = ScriptedRows(tokenizer, [gold, [], gold])
    a, b, c = token_episodes(policy, [task, task, task], 0, 1.0, 1.0, 64, 6)
    assert a["episode"]["reward"] == 1.0 and c["episode"]["reward"] == 1.0
    assert b["episode"]["calls"] == 0 and b["episode"]["reward"] < 1.0 and b["episode"]["steps"] == 1
    assert policy.sizes == [3] + [2] * len(gold)  # b answered at step 1; a and c go on together
    alone = token_episode_of(tokenizer, task, gold)
    assert a["completion_ids"] == alone["completion_ids"] and a["env_mask"] == alone["env_mask"]


def token_episode_of(tokenizer, task, script):
    from flywheel.tasks.training.episodes import token_episode

    return token_episode(Scripted(tokenizer, script), task, 0, 1.0, 1.0, 64, 6)


@pytest.mark.slow
def test_a_killed_multi_turn_grpo_run_resumes_from_its_checkpoint(workplace_dataset, tmp_path) -> None:
    """GRPO on workplace episodes through the CLI, killed (SIGKILL) after its first checkpoint: the rerun resumes
    from it, every step is logged once, and each step's log holds the episodes' rewards and counts and its time
    split into rollout (generation + environment) and update."""
    out = tmp_path / "grpo"
    cmd = [sys.executable, "-m", "flywheel.flows.cli", "train", "--dataset", workplace_dataset, "--out", str(out),
           "--method", "grpo", "--steps", "3", "--save-steps", "1", "--batch-size", "2", "--num-generations",
           "2", "--train-limit", "2", "--eval-limit", "1", "--check-interval", "100", "--max-tokens", "16",
           "--refill", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 400
    while not checkpoint_complete(out / "checkpoints" / "checkpoint-1") and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "adapter").exists() and not (out / "train_log.json").exists()
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    log = json.loads((out / "train_log.json").read_text())
    assert log["resumed_from"].endswith(("checkpoint-1", "checkpoint-2"))
    assert [r["step"] for r in log["history"]] == [1, 2, 3]  # no step lost or logged twice
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    for step in log["history"]:  # the rewards and counts come from the two episodes' sessions
        assert "rewards/workplace_reward/mean" in step and step["episode_steps"] >= 1
        assert {"tool_error_rate", "answer_rate", "train_unsafe_rate"} <= set(step)
        assert 0 < step["rollout_s"] < step["step_time_s"] and step["update_s"] > 0
    assert "heldout_success" in log["history"][-1]


def test_hostile_replies_in_an_episode_are_observations_or_the_end_never_a_crash(tokenizer) -> None:
    """What the policy writes is untrusted: an unknown tool, arguments that are not an object and a path-like name
    come back as error observations (masked out of the loss, counted as tool errors); a reply cut before its end
    token ends the episode; prose ends it as an answer. The reward is the untouched session's verdict."""
    from flywheel.tasks.training.episodes import token_episode

    task = _tasks(1)[0]
    hostile = ['{"tool": "no_such_tool", "args": {}}', '{"tool": "../verify", "args": {}}',
               json.dumps({"tool": task.reference.calls[0].tool, "args": ["not", "an", "object"]}), "I am done."]
    episode = token_episode(Scripted(tokenizer, hostile), task, 0, 1.0, 1.0, 64, 6)
    record = episode["episode"]
    assert record["calls"] == 3 and record["tool_errors"] == 3 and record["answered"] and record["steps"] == 4
    assert record["reward"] is not None and record["reward"] < 1.0
    observed = tokenizer.decode([t for t, m in zip(episode["completion_ids"], episode["env_mask"]) if not m])
    assert observed.count('"error"') == 3

    class Cut(Scripted):  # a reply that hits the token limit mid-call: no end token
        def generate_ids(self, prompts, seed, temperature, top_p, max_new_tokens):
            return [self.tokenizer(self.replies.pop(0), add_special_tokens=False)["input_ids"]]

    cut = token_episode(Cut(tokenizer, [json.dumps({"tool": task.reference.calls[0].tool,
                                                    "args": task.reference.calls[0].args})]), task, 0, 1.0, 1.0, 64, 6)
    assert cut["episode"]["steps"] == 1 and not cut["episode"]["answered"] and cut["env_mask"] == [1] * len(
        cut["completion_ids"])  # no observation appended after a cut reply
