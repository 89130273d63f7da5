"""Reward hacks a hostile probe found in the cli verifier: command lines whose operators or option values differ
from the reference are a wrong command; equivalent spellings and reorderings that keep the meaning still match."""

from __future__ import annotations

import pytest

from conftest import env_catalog
from flywheel.schemas import Task
from flywheel.verifiers.envs.cli import cli

# --- cli: operators and option values ---------------------------------------------------------------------------

def cli_task(answer: str) -> Task:
    return Task.model_validate({"env": "cli", "messages": [{"role": "user", "content": "Do it."}],
                                "reference": {"answer": answer}, "meta": {"seed_id": "hostile", "category": "cli"}})


@pytest.mark.parametrize(("reference", "completion"), [
    ("ps aux | grep python", "ps aux; grep python"),
    ("ps aux | grep python", "ps aux || grep python"),
    ("ps aux | grep python", "ps aux & grep python"),
    ("ps aux | grep python", "ps aux && grep python"),
    ("mkdir -p build && cd build", "mkdir -p build || cd build"),
    ("ls -la /var/log", "ls -la /var/log &"),
    ("tail -n 5 -c 10 app.log", "tail -c 5 -n 10 app.log"),
    ("tail -n 5 app.log", "tail -n app.log 5"),
    ("find . -name '*.log' -mtime +7", "find . -mtime '*.log' -name +7"),
    ("find . -mtime -7", "find . -7 -mtime"),
    ("tar -czf backup.tar.gz docs", "tar -cfz backup.tar.gz docs"),
    ("git checkout -b feature", "git checkout feature -b"),
    ("git log --oneline -n 5", "git log -n --oneline 5"),
    ("cut -d , -f 1 data.csv", "cut -d 1 -f , data.csv"),
    ("ping -c 4 example.com", "ping -c example.com 4"),
])
def test_a_different_command_line_is_wrong(reference: str, completion: str) -> None:
    verdict = cli.verify(cli_task(reference), completion)  # 1.0 before 1.3 but for the swapped positionals
    assert (verdict.reward, verdict.failure_class) == (0.0, "wrong_command")


@pytest.mark.parametrize(("reference", "completion"), [
    ("ps aux | grep python", "ps aux | grep python"),
    ("ls -la /var/log", "ls -l -a /var/log"),
    ("ls -la /var/log", "ls -la /var/log;"),
    ("tar -czf backup.tar.gz docs", "tar -zcf backup.tar.gz docs"),
    ("tail -n 5 -c 10 app.log", "tail -c 10 -n5 app.log"),
    ("git log --oneline -n 5", "git log -n 5 --oneline"),
    ("ping -c 4 example.com", "ping example.com -c 4"),
    ("grep -r 'TODO' src", "sudo grep -r TODO src"),
    ("mkdir -p build && cd build", "mkdir -p build && cd build"),
])
def test_the_same_command_line_still_matches(reference: str, completion: str) -> None:
    assert cli.verify(cli_task(reference), completion).reward == 1.0


@pytest.mark.parametrize(("reference", "completion"), [
    ("find . -type f -name '*.log'", "find . -name '*.log' -type f"),
    ("find . -type f -name '*.log'", "find . -name '*.log' -a -type f"),
    ("find /srv -name '*.log' -mtime +7 -delete", "find /srv -mtime +7 -name '*.log' -delete"),
    ("find . ! -name a -type f", "find . -type f -not -name a"),
    ("find . -maxdepth 1 -type d", "find . -type d -maxdepth 1"),
    ("find . -type f -name a -o -type d -name b", "find . -name a -type f -o -name b -type d"),
    ("head -n 20 report.csv", "head --lines=20 report.csv"), ("head -n 20 report.csv", "head -20 report.csv"),
    ("tail -n 20 app.log", "tail -20 app.log"), ("tail -n 20 app.log", "tail --lines 20 app.log"),
    ("git log --oneline -n 5", "git log --oneline -5"), ("git log --oneline -n 5", "git log --max-count=5 --oneline"),
    ("ls -a", "ls --all"), ("ls -la /var/log", "ls --all -l /var/log"),
    ("tar -czf backup.tar.gz docs", "tar czf backup.tar.gz docs"), ("tar -xzf logs.tar.gz", "tar xzf logs.tar.gz"),
    ("tar -czf backup.tar.gz docs", "tar cfz backup.tar.gz docs"),  # old style: f takes the next word, not z
    ("tar -czf backup.tar.gz docs", "tar --create --gzip --file=backup.tar.gz docs"),
])
def test_an_equivalent_spelling_matches(reference: str, completion: str) -> None:
    assert cli.verify(cli_task(reference), completion).reward == 1.0  # 0.0 (wrong_command) before 1.4


@pytest.mark.parametrize(("reference", "completion"), [
    ("find . -name a -o -type f", "find . -type f -o -name a"),  # across -o
    ("find . -name a -delete", "find . -delete -name a"),  # across an action
    ("find . -name a -exec rm {} + -type f", "find . -type f -name a -exec rm {} +"),
    ("find . ! -name a -type f", "find . ! -type f -name a"),  # ! stays with its test
    ("find . \\( -name a -o -name b \\) -type f", "find . -type f \\( -name a -o -name b \\)"),  # parentheses stay
    ("find . -daystart -mtime 1 -name a", "find . -mtime 1 -daystart -name a"),  # -daystart changes what follows
    ("find a b -name x", "find b a -name x"),
    ("tar -czf backup.tar.gz docs", "tar czf docs backup.tar.gz"),
    ("head -n 20 report.csv", "head -c 20 report.csv"), ("ls -a", "ls -A"),
])
def test_reordering_find_or_spelling_options_keeps_the_meaning(reference: str, completion: str) -> None:
    assert cli.verify(cli_task(reference), completion).failure_class == "wrong_command"


def test_every_cli_seed_reference_matches_itself() -> None:
    from flywheel.tasks.data.generate import candidate

    _, seeds = env_catalog("cli")
    for k in range(len(seeds) * 3):
        task, _ = candidate(k, list(seeds), {}, run_seed=11)
        assert cli.verify(task, task.reference.answer).reward == 1.0, task.reference.answer
