"""Multi-turn SFT rows: a workplace task's gold episode, rendered exactly as the agent loop renders it at eval time.

Contract:
- ``gold_episode(task)`` replays the task's reference calls, one per step, through ``run_episode`` in a fresh
  in-process session (the Session code eval uses), then answers ``DONE``; it raises ValueError naming the task
  when that episode does not score 1.0 with the current verifier (a stale dataset fails before training).
- ``sft_row(tokenizer, task)`` is ``{"input_ids", "assistant_masks"}`` for TRL's SFTTrainer (pre-tokenized: it
  builds the labels from the mask): the episode rendered with ``as_text_chat(..., agent=True)`` and the chat template,
  as ``HFChatModel.encode`` renders each step's prompt. The mask is 1 on every assistant turn's tokens (its text and
  its end-of-turn token) and 0 on the prompt and on every tool observation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flywheel.schemas import Task
from flywheel.tasks.agents.agent import Episode, LocalEnv, PolicyReply, openai_tools, run_episode
from flywheel.tasks.inference.protocol import as_text_chat

if TYPE_CHECKING:
    from flywheel.tasks.training.rewards import RewardKind

DONE = "Done."


def gold_episode(task: Task) -> Episode:
    calls = [json.dumps({"tool": c.tool, "args": c.args}) for c in task.reference.calls]

    def replay(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply:
        step = sum(1 for m in messages if m["role"] == "assistant")
        return PolicyReply(calls[step] if step < len(calls) else DONE)

    episode = run_episode(replay, LocalEnv(), task, max_steps=len(calls) + 1)
    verdict = episode.verdict
    if verdict.reward != 1.0:
        raise ValueError(f"workplace task {task.id}: its gold trajectory ({len(calls)} reference calls) scores "
                         f"{verdict.reward} ({verdict.failure_class}: {verdict.details[:200]}) with the current "
                         "verifier, not 1.0; regenerate the dataset or fix the task's reference")
    return episode


def sft_row(tokenizer: Any, task: Task) -> dict[str, list[int]]:
    chat = as_text_chat(gold_episode(task).messages, openai_tools(task), agent=True)
    text = tokenizer.apply_chat_template(chat, tokenize=False)
    cuts = [0]  # text offsets where the assistant turns start and end, in order
    for i, turn in enumerate(chat):
        if turn["role"] != "assistant":
            continue
        before = tokenizer.apply_chat_template(chat[:i], tokenize=False, add_generation_prompt=True)
        after = tokenizer.apply_chat_template(chat[:i + 1], tokenize=False).rstrip("\n")  # through <|im_end|>
        if not (after.startswith(before) and text.startswith(after)):
            raise ValueError(f"workplace task {task.id}: the chat template does not render an episode turn by turn "
                             "(each step's prompt a prefix of the next); multi-turn SFT cannot mask its turns")
        cuts += [len(before), len(after)]
    cuts.append(len(text))
    ids: list[int] = []
    mask: list[int] = []
    for k in range(len(cuts) - 1):  # even pieces: prompt and observations (0); odd pieces: assistant turns (1)
        piece = tokenizer(text[cuts[k]:cuts[k + 1]], add_special_tokens=False)["input_ids"]
        ids += piece
        mask += [k % 2] * len(piece)
    return {"input_ids": ids, "assistant_masks": mask}


# multi-turn GRPO: one completion is one whole episode

EPISODE_TOKENS = 1024  # an episode's completion (replies and observations) stops growing here


def agent_prompt(task: Task) -> list[dict[str, str]]:
    """The first step's prompt, as the agent loop renders it."""
    return as_text_chat([m.model_dump(exclude_none=True) for m in task.messages], openai_tools(task), agent=True)


def _observation_ids(tokenizer: Any, chat: list[dict[str, str]], n_before: int) -> list[int]:
    """The tokens between the end of the last assistant turn (its end token) and the next assistant turn: the tool
    results as the chat template renders them, then the next generation prompt."""
    full = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    upto = tokenizer.apply_chat_template(chat[:n_before], tokenize=False).rstrip("\n")
    return tokenizer(full[len(upto):], add_special_tokens=False)["input_ids"]


@dataclass
class _TokenEpisode:
    """An episode under way at the token level: its session, messages, prompt, completion and mask so far."""

    session: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    prompt_ids: list[int]
    completion: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    steps: int = 0
    calls: int = 0
    tool_errors: int = 0
    stop: str | None = None


def _begin(policy: Any, env: LocalEnv, task: Task) -> _TokenEpisode:
    messages = [m.model_dump(exclude_none=True) for m in task.messages]
    tools = openai_tools(task)
    prompt_ids = policy.encode([as_text_chat(messages, tools, agent=True)])[0]
    return _TokenEpisode(env.seed(task), messages, tools, prompt_ids)


def _advance(policy: Any, env: LocalEnv, ep: _TokenEpisode, new: list[int]) -> None:
    """Append the policy's new tokens, run their calls in the episode's session and append the observation tokens
    (masked out), or end the episode: an answer in text, a cut reply, no room left."""
    from flywheel.tasks.inference.protocol import call_arguments, parse_action

    ep.steps += 1
    ep.completion += new
    ep.mask += [1] * len(new)
    calls = parse_action(policy.tokenizer.decode(new, skip_special_tokens=True))
    if not calls:
        ep.stop = "answer"
        return
    ep.messages.append({"role": "assistant", "content": None, "tool_calls": calls})
    n_before = len(as_text_chat(ep.messages, ep.tools, agent=True))
    for call in calls:
        name = call.get("function", {}).get("name", "")
        observation = env.call(ep.session, name, call_arguments(call))
        ep.calls += 1
        ep.tool_errors += "error" in observation
        ep.messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "name": name,
                            "content": json.dumps(observation)})
    obs = _observation_ids(policy.tokenizer, as_text_chat(ep.messages, ep.tools, agent=True), n_before)
    if new[-1:] != [policy.tokenizer.eos_token_id] or len(ep.completion) + len(obs) >= EPISODE_TOKENS:
        ep.stop = "max_tokens"  # the reply was cut, or no room for the observation and another reply
        return
    ep.completion += obs
    ep.mask += [0] * len(obs)


def token_episodes(policy: Any, tasks: list[Task], seed: int, temperature: float, top_p: float,
                   max_new_tokens: int, max_steps: int) -> list[dict[str, Any]]:
    """Episodes at the token level, each in its own fresh in-process session, run in lockstep: at every step the
    episodes under way generate in one batch (seed H(seed, step)). Each step's context is the previous context plus
    what the policy generated plus the observation tokens, so the trained log-probs are those sampled. Returns per
    episode prompt_ids, completion_ids, env_mask (1: generated, 0: observation) and the episode's record."""
    from flywheel.tasks.inference.protocol import batch_seed

    env = LocalEnv()
    eps = [_begin(policy, env, task) for task in tasks]
    for step in range(1, max_steps + 1):
        active = [ep for ep in eps if ep.stop is None]
        if not active:
            break
        budgets = [min(max_new_tokens, EPISODE_TOKENS - len(ep.completion)) for ep in active]
        news = policy.generate_ids([ep.prompt_ids + ep.completion for ep in active], batch_seed([seed, step]),
                                   temperature, top_p, max(budgets))
        for ep, new, budget in zip(active, news, budgets, strict=True):
            _advance(policy, env, ep, new[:budget])  # a shorter budget: the sample cut where generation would stop
    out = []
    for ep in eps:
        verdict = env.verify(ep.session)
        record = {"reward": verdict.reward if verdict.valid else None, "valid": verdict.valid, "steps": ep.steps,
                  "calls": ep.calls, "tool_errors": ep.tool_errors, "answered": ep.stop == "answer",
                  "unsafe": bool(verdict.components.get("unsafe_calls", 0)), "failure_class": verdict.failure_class}
        out.append({"prompt_ids": ep.prompt_ids, "completion_ids": ep.completion, "env_mask": ep.mask,
                    "episode": record, "verdict": verdict})
    return out


def token_episode(policy: Any, task: Task, seed: int, temperature: float, top_p: float, max_new_tokens: int,
                  max_steps: int) -> dict[str, Any]:
    """One episode (``token_episodes`` of one task)."""
    return token_episodes(policy, [task], seed, temperature, top_p, max_new_tokens, max_steps)[0]


def make_episode_rollout(tokenizer: Any, tasks: list[Task], seed: int, max_steps: int, prefix_cache: bool = True,
                         refill: int = 0, reward: RewardKind = "verifier", threshold: float = 1.0,
                         vllm_base: Path | None = None) -> tuple[Any, Any, Any, Any]:
    """TRL's ``rollout_func`` for multi-turn GRPO: each of the G copies of a prompt is its own episode in its own
    session, a round's episodes generated in lockstep (``token_episodes``), in the trainer or, with ``vllm_base``, on
    a vLLM engine synced to the policy's weights once per optimizer step (``vllm_rollout.VLLMPolicy``: each step's
    context, observation tokens included, goes to it as token ids); the prompt names its task (TRL passes prompts
    only). A group whose G episodes all score the same is redrawn with a fresh task (``rollout.Refill``).
    Each episode's verdict goes to the env's reward function (TRL passes the ``verdict`` field on), which reuses it.
    Also returns the counters: the ``Rollouts`` state (rollout seconds: generation and environment), the ``Refill``
    (groups dropped per step) and the ``EpisodeStats``."""
    from flywheel.tasks.training.rewards import shaped
    from flywheel.tasks.training.rollout import Refill, Rollouts, distinct

    by_prompt = {json.dumps(agent_prompt(t)): t for t in tasks}
    state, filtering = Rollouts(tokenizer, seed, prefix_cache, vllm_base), Refill(tasks, refill)

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        policy, _, path = state.start(trainer)
        first, g = distinct(prompts, by_prompt)

        def generate(group_tasks: list[Task], round_seed: int) -> list[list[dict[str, Any]]]:
            flat = token_episodes(policy, [task for task in group_tasks for _ in range(g)], round_seed,
                                  trainer.temperature, trainer.top_p, trainer.max_completion_length, max_steps)
            for e in flat:  # the reward GRPO trains on (--reward); the episode's "reward" stays the verifier's own
                record = e["episode"]
                e["reward"] = record["train_reward"] = shaped(record["reward"], record["failure_class"], reward,
                                                              threshold)
            return [flat[k * g:(k + 1) * g] for k in range(len(group_tasks))]

        groups = filtering.run(first, path, generate)
        episodes = [(t, e) for t, group in groups for e in group]
        stats.records += [e["episode"] for _, e in episodes]
        out = {key: [e[key] for _, e in episodes] for key in ("prompt_ids", "completion_ids", "env_mask", "verdict")}
        return out | {"task": [t.model_dump_json() for t, _ in episodes], "logprobs": None}

    stats = EpisodeStats()
    return state.timed(rollout), state, filtering, stats


class EpisodeStats:
    """Per-step counts of the episodes GRPO trained on, for the log: episode length, tool-error and answer rates (the
    env's reward function logs the invalid and unsafe shares itself)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def take(self) -> dict[str, float]:
        rs, self.records = self.records, []
        if not rs:
            return {}
        n, calls = len(rs), sum(r["calls"] for r in rs)
        return {"episode_steps": sum(r["steps"] for r in rs) / n,
                "tool_error_rate": sum(r["tool_errors"] for r in rs) / calls if calls else 0.0,
                "answer_rate": sum(r["answered"] for r in rs) / n}
