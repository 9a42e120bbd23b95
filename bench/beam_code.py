"""beam_code: the score the benchmark's published code computes, from our judge's own replies.

The judge stage scores answers its own way (see `stages.judge` and `OUR_CHOICES`). To compare
with the benchmark's tables, this module recomputes each question's score with the arithmetic of
the benchmark's `compute_metrics.py` (pinned in pins.yaml, section judge), from the same
`Judgement` records: no model call is made. What differs from our score is in `DIFFERENCES`.

- Rubric-scored abilities (all but event_ordering): each item's verdict is truncated with `int()`
  as the benchmark's code does (0.5 becomes 0); the question scores the mean over its items.
- event_ordering: the normalised Kendall tau-b, (tau_b + 1) / 2, alone. The benchmark's
  `evaluate_event_ordering` returns precision, recall, f1, `tau_norm`, `final_score` (tau_norm ×
  f1) and a rubric-judge mean (`float`, not truncated). Which one its tables use is decided by
  its aggregation script (`report_results.py`, not among the pinned files): mean `tau_norm` for
  this ability, as third-party ports of that script describe it and the paper's tau-only
  number suggests; `final_score` is the product our own score uses.
  The answer is split raw on "\\n", as the benchmark splits it, and the tau is ranked by line
  text, as the benchmark ranks it (identical unmatched lines, such as every blank line, are one
  item at their last position; events the answer missed share the rank after the union's size).

What beam_code cannot reproduce, because it reuses verdicts instead of asking again:
- the benchmark sends each raw line, bullet and numbering included, to the equivalence judge; we
  reuse the verdict our alignment got for the cleaned line (`split_answer_lines`), and a raw line
  that cleans to nothing is unmatched; where a raw line held another line boundary (a lone "\\r",
  a Unicode line separator) and was cleaned into several lines, it takes the first match among
  them;
- every verdict was obtained our way: the judge prompt's `<question>` filled, the equivalence
  reply read as the word "yes", a failed or unparsable reply counted as 0 / not equivalent, at
  most `judge.max_equivalence_calls` equivalence calls per question;
- where tau-b is undefined (a single event, matched by the only raw line) the benchmark gets NaN;
  we keep `order_scores`' rule (1 if matched). BEAM's event rubrics have 3 to 9 events.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import kendalltau

from bench.event_order import EVENT_ORDERING, order_scores, split_answer_lines, warnings_ignored
from schemas.errors import DataError
from schemas.judging import EventAlignment, Judgement

DIFFERENCES: tuple[str, ...] = (
    "Item scores: ours keeps a rubric item judged 0.5 as 0.5; beam_code truncates each verdict "
    "with int(), as the benchmark does for every ability but event_ordering, so 0.5 counts 0.",
    "event_ordering score: ours is event_f1 × event_tau_norm; beam_code is the normalised tau "
    "alone, (tau_b + 1) / 2, the number the benchmark's aggregation reports for this ability.",
    "event_ordering lines: ours aligns cleaned lines (bullets, numbering and heading hashes "
    "stripped, lines without a letter or digit dropped); beam_code splits the answer raw on "
    "'\\n', so blank lines, rules and the empty string after a trailing newline enter its ranking "
    "as unmatched lines.",
    "event_ordering ranking: ours ranks every unmatched line as an item of its own; beam_code "
    "ranks by text, as the benchmark does: identical unmatched lines (every blank line is '') "
    "are one item at their last position, and the missed events' shared rank (union size + 1) "
    "can tie with a late line or come before it.",
    "Known-bad rubrics: ours also reports score_excluding_known_bad; beam_code has no such mean, "
    "since the benchmark knows no broken rubric and counts every question.",
)
"""One line each: how our score and beam_code differ, though both come from the same replies."""

OUR_CHOICES: tuple[str, ...] = (
    "Answer lines: we split on every line boundary Python knows (not only '\\n'), strip "
    "whitespace, leading bullets, numbering and heading hashes, and drop lines without a letter "
    "or digit; the benchmark keeps every raw '\\n' piece (beam_code follows it, reusing the "
    "verdict on the cleaned line).",
    "Undefined tau: where tau-b is undefined (a single event to order, or no answer line) we set "
    "tau_norm to 1 if the event was matched, else 0; the benchmark's guard tests for None, which "
    "scipy never returns, so it gets NaN (beam_code keeps ours; BEAM's event rubrics have 3 to 9 "
    "events, so its raw split never meets the case).",
    "Repeated identical unmatched lines: each is an item of its own in our tau ranking; the "
    "benchmark ranks by text and merges them into one at the last occurrence (both count each as "
    "a false positive; beam_code follows the benchmark).",
    "Equivalence calls are capped per question (judge.max_equivalence_calls): past the cap lines "
    "count as unmatched and the question is flagged call_cap_reached; the benchmark has no cap "
    "(beam_code inherits the cap, as it makes no call).",
    "The judge prompt's <question> slot is filled; the benchmark's code never fills it "
    "(beam_code inherits our replies).",
    "An equivalence reply means 'same event' when it holds the word yes; the benchmark accepts "
    "'yes' anywhere, even inside 'eyes' (beam_code inherits our verdicts).",
    "A failed call or a reply without a valid verdict scores 0 (not equivalent) and flags the "
    "question; the benchmark repairs the JSON with json_repair or stops with an error (beam_code "
    "inherits our 0).",
    "event_ordering makes no rubric-judge call: its items score 1 when a line matched them; the "
    "benchmark also judges each item (llm_judge_score, kept as float, not in its tables).",
)
"""One line each: what our scorer does that the benchmark's code does not."""

EventScores = tuple[float, float, float, float | None, float]
"""(precision, recall, f1, tau_b, tau_norm), as `bench.event_order.order_scores` returns them."""


def beam_code_item(score: float) -> float:
    """A rubric item's score as the benchmark counts it: the verdict truncated to an integer."""
    return float(math.trunc(score))


def align_raw_lines(answer: str, event: EventAlignment) -> list[int | None]:
    """The match of each raw line of `answer.split("\\n")`, taken from our alignment: a raw line
    that `split_answer_lines` turned into answer line k takes line k's match (in order, so a
    repeated line takes its own occurrence's match); a raw line it dropped is unmatched."""
    raw_lines = answer.split("\n")
    cleaned = [split_answer_lines(raw) for raw in raw_lines]
    if [line for parts in cleaned for line in parts] != event.answer_lines:
        raise DataError(
            "the answer does not give the lines its event alignment was made from; pass the "
            "answer that was judged"
        )
    matches: list[int | None] = []
    k = 0
    for parts in cleaned:
        found = [m for m in event.matches[k : k + len(parts)] if m is not None]
        matches.append(found[0] if found else None)
        k += len(parts)
    return matches


def _tau_by_text(
    reference_count: int, raw_lines: Sequence[str], matches: Sequence[int | None]
) -> float | None:
    """Kendall tau-b ranked as the benchmark ranks: items are the reference events, then the
    distinct texts of unmatched lines; the answer ranks an item at its last line (1-based), the
    reference ranks its events 1..n; what a list lacks takes the union's size + 1. None where
    tau-b is undefined."""
    # An item is an event's index (int) or an unmatched line's text (str): never equal.
    items: list[int | str] = [
        m if m is not None else raw for raw, m in zip(raw_lines, matches, strict=True)
    ]
    union: list[int | str] = list(range(reference_count))
    union += [item for item in dict.fromkeys(items) if isinstance(item, str)]
    absent = len(union) + 1
    last_line = {item: position for position, item in enumerate(items, start=1)}
    reference_ranks = [u + 1 if isinstance(u, int) else absent for u in union]
    answer_ranks = [last_line.get(u, absent) for u in union]
    with warnings_ignored():
        tau = float(kendalltau(reference_ranks, answer_ranks, variant="b").statistic)
    return None if math.isnan(tau) else tau


def beam_code_event(answer: str, event: EventAlignment, reference_count: int) -> EventScores:
    """(precision, recall, f1, tau_b, tau_norm) of event ordering on the raw split of `answer`,
    from our alignment (`align_raw_lines`). Precision, recall and f1 are `order_scores`' (the
    benchmark's count: each unmatched line a false positive); tau is ranked by text
    (`_tau_by_text`). Where tau-b is undefined, tau_norm follows `order_scores`: 1 if matched."""
    matches = align_raw_lines(answer, event)
    precision, recall, f1, _, _ = order_scores(reference_count, matches)
    tau_b = _tau_by_text(reference_count, answer.split("\n"), matches)
    if tau_b is None:
        return precision, recall, f1, None, 1.0 if f1 > 0 else 0.0
    return precision, recall, f1, tau_b, (tau_b + 1) / 2


def beam_code_score(judgement: Judgement, answer: str) -> float:
    """One question's score as the benchmark's code computes it: event_ordering, the tau_norm of
    `beam_code_event` on the judged `answer`; other abilities, the mean of the truncated item
    scores (the answer is not needed there)."""
    if not judgement.items:
        raise DataError(f"{judgement.question_id} has no rubric items; nothing to score")
    if judgement.ability == EVENT_ORDERING:
        if judgement.event is None:
            raise DataError(f"{judgement.question_id}: event_ordering judgement without alignment")
        return beam_code_event(answer, judgement.event, len(judgement.items))[4]
    return sum(beam_code_item(i.score) for i in judgement.items) / len(judgement.items)
