"""Event ordering: the answer's lines aligned with the reference events, and the order scores.

As the benchmark's `align_with_llm` and `event_ordering_score` do it (greedy first match by
an equivalence call per pair; precision, recall, F1 and a normalised Kendall tau-b), with the
equivalence call injected so all of it runs offline.
"""

from __future__ import annotations

import math
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from scipy.stats import kendalltau

from schemas.errors import DataError
from schemas.judging import EventAlignment

EVENT_ORDERING = "event_ordering"

AreEquivalent = Callable[[str, str], bool | None]
"""(answer line, rubric event) -> same event?  None when the call failed."""


_WARNING_FILTERS = threading.Lock()


@contextmanager
def warnings_ignored() -> Iterator[None]:
    """Warnings off (scipy's about a constant rank list, whose tau is handled as undefined).
    The filters `catch_warnings` saves and restores are the process's (before Python 3.14), so
    two threads inside at once could leave one's filter behind; the judge scores questions on
    threads, hence the lock."""
    with _WARNING_FILTERS, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


_LINE_MARKER = re.compile(r"^(?:[-*+•·‣▪◦–—]|\(?\d{1,3}[.)]|#{1,6})\s+")


def split_answer_lines(answer: str) -> list[str]:
    """The answer's events: one per line, without bullets, numbering or headings' hashes; lines
    with no letter or digit (blank lines, rules like `---`) are dropped."""
    lines: list[str] = []
    for raw in answer.splitlines():
        line = raw.strip()
        while (marker := _LINE_MARKER.match(line)) is not None:
            line = line[marker.end() :].strip()
        if any(ch.isalnum() for ch in line):
            lines.append(line)
    return lines


def align_events(
    reference: Sequence[str],
    lines: Sequence[str],
    are_equivalent: AreEquivalent,
    *,
    max_calls: int | None = None,
) -> tuple[list[int | None], int, int, bool]:
    """Greedy first-match alignment as the benchmark's `align_with_llm`: each line, in order, is
    compared with each still-unused reference event, in order, until one is equivalent.
    Returns (match per line, calls, failed calls, capped)."""
    used: set[int] = set()
    matches: list[int | None] = []
    calls = failed = 0
    capped = False
    for line in lines:
        matched: int | None = None
        for index, event in enumerate(reference):
            if index in used:
                continue
            if max_calls is not None and calls >= max_calls:
                capped = True
                break
            calls += 1
            verdict = are_equivalent(line, event)
            if verdict is None:
                failed += 1
            elif verdict:
                matched = index
                break
        if matched is not None:
            used.add(matched)
        matches.append(matched)
    return matches, calls, failed, capped


def order_scores(
    reference_count: int, matches: Sequence[int | None]
) -> tuple[float, float, float, float | None, float]:
    """(precision, recall, f1, tau_b, tau_norm) as the benchmark's `event_ordering_score`, on
    positions: the union is the reference events in order, then the unmatched lines; each list
    ranks its own members 1.. and everything else last (one shared tie rank); tau-b by scipy.

    tau-b is undefined when a rank list is constant: with no answer lines (f1 = 0, so tau_norm
    = 0) or when the union holds a single event. The benchmark lets scipy's NaN spread into its
    means; we use tau_norm = 1 when that one event was matched (there is nothing to misorder)
    and 0 otherwise, so every question keeps a number."""
    if reference_count < 1:
        raise DataError("event ordering needs at least one reference event, found none")
    matched = [m for m in matches if m is not None]
    tp = len(matched)
    fp = len(matches) - tp
    fn = reference_count - tp
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    union: list[tuple[str, int]] = [("ref", i) for i in range(reference_count)]
    union += [("line", k) for k, m in enumerate(matches) if m is None]
    tie_rank = len(union) + 1
    system_rank: dict[tuple[str, int], int] = {}
    for position, m in enumerate(matches, start=1):
        system_rank[("ref", m) if m is not None else ("line", position - 1)] = position
    reference_ranks = [i + 1 if kind == "ref" else tie_rank for kind, i in union]
    system_ranks = [system_rank.get(u, tie_rank) for u in union]
    with warnings_ignored():
        tau = float(kendalltau(reference_ranks, system_ranks, variant="b").statistic)
    if math.isnan(tau):
        return precision, recall, f1, None, 1.0 if f1 > 0 else 0.0
    return precision, recall, f1, tau, (tau + 1) / 2


def score_event_ordering(
    reference: Sequence[str],
    answer: str,
    are_equivalent: AreEquivalent,
    *,
    max_calls: int | None = None,
) -> EventAlignment:
    lines = split_answer_lines(answer)
    matches, calls, failed, capped = align_events(
        reference, lines, are_equivalent, max_calls=max_calls
    )
    precision, recall, f1, tau_b, tau_norm = order_scores(len(reference), matches)
    return EventAlignment(
        answer_lines=lines,
        matches=matches,
        calls=calls,
        failed_calls=failed,
        capped=capped,
        precision=precision,
        recall=recall,
        f1=f1,
        tau_b=tau_b,
        tau_norm=tau_norm,
    )
