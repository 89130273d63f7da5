"""The reward GRPO trains on, from the verifier's verdict (``TrainConfig.reward``, ``flywheel run --grpo-reward``).

- ``verifier``: the verifier's own reward, partial credit included.
- ``success``: 1 when the sample passes as the gate counts it (reward >= the success threshold), -1 when it is unsafe
  or at the verifier's floor (malformed, too large), 0 otherwise.
- None (the verifier could not judge the sample) stays None under both: it does not count, it is not a 0.

Why ``success``: partial credit pays for leaving out an argument the policy is unsure of, and a strong policy learns
to (bench/results/learning.md). The shaping itself (``shaped``) runs inside each env's reward function
(``verifiers/common.py: batch_rewards``), which reads the choice from the GRPO rows' ``reward_kind`` column.
"""

from __future__ import annotations

from typing import Any, Literal

from flywheel.verifiers.common import shaped

__all__ = ["REWARD_HELP", "RewardKind", "shaped", "train_reward"]

RewardKind = Literal["verifier", "success"]
REWARD_HELP = ("GRPO reward: verifier (the verifier's partial credit, which pays for leaving arguments out) | success "
               "(1 when a completion passes as the gate counts it, -1 when malformed or unsafe, 0 otherwise).")


def train_reward(verdict: Any, kind: RewardKind, threshold: float) -> float | None:
    """``shaped`` of a ``Verdict``."""
    return shaped(verdict.reward if verdict.valid else None, verdict.failure_class, kind, threshold)
