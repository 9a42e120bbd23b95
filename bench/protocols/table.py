"""The record's and the page's table of the scoring protocols: ability × protocol, each column
with its judge model and label, and a line per protocol saying how it scores."""

from __future__ import annotations

from typing import Any

from bench.protocols import PROTOCOLS
from schemas.protocols import ProtocolsSummary
from schemas.records import ABILITIES


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def protocol_table(summary: ProtocolsSummary) -> list[str]:
    """The record's section (markdown lines)."""
    protocols = summary.protocols
    head = " | ".join(f"{p.protocol} (judge `{p.judge_model}`)" for p in protocols)
    lines = [
        "## Scores per protocol",
        "",
        "The same answers scored under each protocol of params `judge.protocols`, each with its "
        "own judge prompt (read at its pinned commit), item rounding, event-ordering formula and "
        "aggregate. Only a score labelled paper-comparable may stand beside the paper's tables.",
        "",
        f"| ability | {head} |",
        f"|---|{'---:|' * len(protocols)}",
    ]
    for ability in ABILITIES:
        lines.append(f"| {ability} | {' | '.join(_fmt(p.abilities[ability]) for p in protocols)} |")
    lines += [
        f"| overall (micro) | {' | '.join(_fmt(p.micro) for p in protocols)} |",
        f"| overall (macro) | {' | '.join(_fmt(p.macro) for p in protocols)} |",
        "",
    ]
    for p in protocols:
        how = PROTOCOLS[p.protocol]
        lines.append(
            f"- **{p.protocol}**: {_fmt(p.score)} ({p.aggregate}), **{p.label}**. Source "
            f"`{p.source}`; judge prompt {how.judge_prompt}; items {how.item_scale}; event "
            f"ordering {how.event_formula}; its published numbers were judged by "
            f"{p.published_judge}; {p.failed_calls} judge replies unreadable or failed (scored 0)."
        )
    return lines


def protocol_page_data(summary: ProtocolsSummary | None) -> list[dict[str, Any]]:
    """The page's data: per protocol its label, judge, aggregate score and ability scores."""
    if summary is None:
        return []
    return [
        {
            "protocol": p.protocol,
            "label": p.label,
            "judge_model": p.judge_model,
            "aggregate": p.aggregate,
            "score": p.score,
            "micro": p.micro,
            "macro": p.macro,
            "abilities": [{"name": a, "score": p.abilities[a]} for a in ABILITIES],
        }
        for p in summary.protocols
    ]


def protocol_metrics(summary: ProtocolsSummary | None) -> dict[str, float]:
    """The headline's `protocol_score`: each protocol's score under its own aggregate, beam_code
    left out (its number is `score_beam_code.overall`, as before)."""
    if summary is None:
        return {}
    return {
        p.protocol: p.score
        for p in summary.protocols
        if p.protocol != "beam_code" and p.score is not None
    }
