"""The reward GRPO trains on, from the verifier's verdict (``TrainConfig.reward``, ``flywheel run --grpo-reward``).

Contract:
- ``verifier``: the verifier's own reward, partial credit included.
- ``success``: success or nothing. 1 when the sample passes as the gate counts it (reward >= the success threshold),
  -1 when it is unsafe or at the verifier's floor (malformed, too large), 0 otherwise.
- None (the verifier could not judge the sample) stays None under both: it does not count, it is not a 0.

Why ``success`` exists: partial credit pays for leaving an argument out. tool_call gives 0.9 for three of four
arguments right and the fourth left out, and 0.7 for all four written with one that breaks the schema. A policy that
is already strong learns to leave out what it is unsure of, and held-out success falls (bench/RESULTS.md, the full
profile: -0.035 after GRPO on partial credit, no change on success-or-nothing). Success-or-nothing pays only for
what ships.
"""

from __future__ import annotations

from typing import Any, Literal

RewardKind = Literal["verifier", "success"]
REWARD_HELP = ("GRPO reward: verifier (the verifier's partial credit, which pays for leaving arguments out) | success "
               "(1 when a completion passes as the gate counts it, -1 when malformed or unsafe, 0 otherwise).")


def shaped(reward: float | None, failure_class: str | None, kind: RewardKind, threshold: float) -> float | None:
    """The training reward of a verdict's reward (None: the verifier could not judge) and failure class."""
    if reward is None or kind == "verifier":
        return reward
    if failure_class == "unsafe_action" or reward <= -1.0:
        return -1.0
    return 1.0 if reward >= threshold else 0.0


def train_reward(verdict: Any, kind: RewardKind, threshold: float) -> float | None:
    """``shaped`` of a ``Verdict``."""
    return shaped(verdict.reward if verdict.valid else None, verdict.failure_class, kind, threshold)
