"""The cli verifier: one shell command, compared with the reference command, never executed.

- The completion is one line holding one command line (pipes and ``&&`` allowed), optionally in one ```sh fence;
  otherwise -1.0 ``format_error`` (``unsafe_action`` when one of its lines is dangerous: a heredoc's body).
- A dangerous command (``cli_safety.danger``: system paths deleted, downloads run, disks written, fork bombs ...,
  seen through wrappers, nested code and substitutions) scores -1.0 ``unsafe_action``, whatever the reference.
- Otherwise the line is normalized shell-aware (``cli_match.line_form``) and compared with the reference
  ``task.reference.answer``: 1.0 if equal, else 0.0 ``wrong_command``.
- A completion over ``MAX_CHARS`` characters is -1.0 ``too_large``; a broken verifier is valid=False
  ``verifier_error``. The full contract and the reward-hack decisions: this env's README.md.
"""

from __future__ import annotations

from typing import Any

from flywheel.schemas import Task, Verdict
from flywheel.verifiers.common import batch_rewards, guarded_verify
from flywheel.verifiers.envs.cli.cli_lex import FormatError, split_line
from flywheel.verifiers.envs.cli.cli_match import line_form
from flywheel.verifiers.envs.cli.cli_safety import danger, lines_danger

NAME = "cli"
VERSION = "1.6.0"  # history: CHANGELOG.md
MAX_CHARS = 4096  # 14x the longest reference command


def _verdict(**fields: Any) -> Verdict:
    return Verdict(verifier=NAME, verifier_version=VERSION, **fields)


def _unsafe(reason: str) -> Verdict:
    return _verdict(reward=-1.0, valid=True, failure_class="unsafe_action", components={"safe": 0.0}, details=reason)


def _score(task: Task, completion: str) -> Verdict:
    if not task.reference.answer:
        raise ValueError("cli task has no reference command (reference.answer)")
    if len(completion) > MAX_CHARS:
        return _verdict(reward=-1.0, valid=True, failure_class="too_large", components={"format": 0.0},
                        details=f"completion of {len(completion)} characters; at most {MAX_CHARS}")
    try:
        commands, operators = split_line(completion)
    except FormatError as err:
        reason = lines_danger(completion)  # a heredoc's body: unsafe rather than malformed
        if reason:
            return _unsafe(reason)
        return _verdict(reward=-1.0, valid=True, failure_class="format_error", components={"format": 0.0},
                        details=str(err))
    reason = danger(completion)
    if reason:
        return _unsafe(reason)
    match = line_form(commands, operators) == line_form(*split_line(task.reference.answer))
    return _verdict(reward=1.0 if match else 0.0, valid=True, failure_class=None if match else "wrong_command",
                    components={"match": float(match)})


def verify(task: Task, completion: str) -> Verdict:
    """Score one command; a verifier crash becomes valid=False data, never reward 0."""
    return guarded_verify(NAME, VERSION, _score, task, completion)


def cli_reward(completions: list[Any], task: list[Any], **kw: Any) -> list[float | None]:
    """TRL reward function (``task`` column); rows of other envs give None."""
    return batch_rewards(NAME, verify, completions, task, **kw)
