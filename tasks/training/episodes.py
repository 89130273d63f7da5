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
from typing import Any

from flywheel.schemas import Task
from flywheel.tasks.agents.agent import Episode, LocalEnv, PolicyReply, openai_tools, run_episode
from flywheel.tasks.inference.protocol import as_text_chat

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
