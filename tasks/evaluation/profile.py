"""Reward profiling before training: histogram, failure classes and samples per score band.

Contract: ``profile_markdown(rows, verifier)`` is pure: rows are dicts with
"completion" and "verdict" (reward, valid, failure_class, details); the same
rows give the same report. Invalid verdicts (the verifier failed) are counted
apart from reward 0. Text from the rows (completions, details, failure classes)
has its control characters written as escapes (``\\x1b``): model output never
reaches a terminal or a markdown viewer as escape sequences.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

BANDS = ((-1.0, -0.5, "[-1, -0.5)"), (-0.5, 0.0, "[-0.5, 0)"), (0.0, 0.5, "[0, 0.5)"), (0.5, 1.0, "[0.5, 1)"),
         (1.0, 1.01, "1.0"))


def band_of(reward: float) -> str:
    return next((name for low, high, name in BANDS if low <= reward < high), "out of range")


# C0 and C1 controls, DEL, and the bidi overrides and isolates that reorder what a reader sees (U+202A-202E,
# U+2066-2069): a terminal runs \x1b[2J, a title change or a hyperlink, a viewer shows text out of order
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(text: str) -> str:
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _cell(text: Any, limit: int = 160) -> str:
    """One table cell; a trajectory (message list) is shown as its JSON; control characters as escapes."""
    raw = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    flat = _escaped(" ".join(raw.split())).replace("|", "\\|").replace("`", "'")
    return (flat[:limit] + "...") if len(flat) > limit else flat


def profile_markdown(rows: list[dict[str, Any]], verifier: str, samples: int = 3) -> str:
    valid = [r for r in rows if r["verdict"]["valid"] and r["verdict"]["reward"] is not None]
    rewards = [r["verdict"]["reward"] for r in valid]
    bands = Counter(band_of(x) for x in rewards)
    classes = Counter(_cell(r["verdict"]["failure_class"] or "(none: full reward)") for r in rows)
    lines = [f"# Reward profile: {verifier}", "",
             f"{len(rows)} rollouts, {len(rows) - len(valid)} with verifier errors (valid=false, not counted as 0).",
             f"Mean reward {sum(rewards) / len(rewards):.3f}." if rewards else "No valid rewards.", "",
             "## Histogram", "", "| band | rollouts | share | |", "|---|---:|---:|---|"]
    for _, _, name in BANDS:
        share = bands[name] / max(len(valid), 1)
        lines.append(f"| {name} | {bands[name]} | {share:.1%} | {'#' * round(share * 40)} |")
    lines += ["", "## Failure classes", "", "| failure class | rollouts |", "|---|---:|"]
    lines += [f"| {name} | {n} |" for name, n in classes.most_common()]
    lines += ["", f"## Samples per band (up to {samples}; read them before training)", ""]
    for _, _, name in BANDS:
        picked = [r for r in valid if band_of(r["verdict"]["reward"]) == name][:samples]
        if picked:
            lines += [f"### {name}", "", "| reward | failure class | completion | details |", "|---:|---|---|---|"]
            lines += [f"| {r['verdict']['reward']} | {_cell(r['verdict']['failure_class'] or '')} | "
                      f"`{_cell(r['completion'])}` "
                      f"| {_cell(r['verdict'].get('details', ''))} |" for r in picked]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
