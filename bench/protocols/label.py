"""The label a protocol's score carries in a table.

A score is called "paper-comparable" only under the benchmark's own prompts and formula
(beam_code), on a complete tier and mode (mode `all`, every conversation of the split), with the
judge named (and not a test model); every other score carries its protocol's name and why it is
not comparable with the paper's tables.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.protocols.base import ScoringProtocol

PAPER_PROTOCOL = "beam_code"


def incomplete_reason(mode: str, conversations: Sequence[str]) -> str | None:
    """Why the run's questions are not a whole tier (None when they are: mode `all`, no subset)."""
    if mode != "all":
        return f"mode {mode} is not the whole tier"
    if conversations:
        return f"only conversations {', '.join(conversations)} (params slice.conversations)"
    return None


def protocol_label(
    protocol: ScoringProtocol,
    *,
    incomplete: str | None,
    judge_model: str | None,
    test_model: bool,
) -> tuple[bool, str]:
    """(paper-comparable?, the label) of a protocol's score in this run."""
    judge = f"judge {judge_model}" if judge_model else "judge not named"
    reasons: list[str] = []
    if protocol.name != PAPER_PROTOCOL:
        reasons.append(f"{protocol.title}'s prompts and formula, not the benchmark's")
    if incomplete is not None:
        reasons.append(incomplete)
    if not judge_model:
        reasons.append("the judge is not named")
    if test_model:
        reasons.append("a test model judged")
    if not reasons:
        return True, f"paper-comparable (BEAM's prompts and formula, {judge})"
    return False, f"{protocol.title} protocol ({judge}); not paper-comparable: {'; '.join(reasons)}"
