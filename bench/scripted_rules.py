"""The test model's rules for the judge's prompts (tasks `judge` and `equivalence`), beside the code
that writes those prompts (bench/scorer_prompts.py, bench/judge.py): a change to a prompt and to
the rule that reads it travel together. The scripted model loads this module by name
(clients/scripted/backend.py `RULE_MODULES`); no stage imports it, so it is no code dep of a real
run. A run with these rules measures nothing.

- `judge`: reads the rubric item and the response from the prompt and returns
  `{"score": 1.0 | 0.5 | 0.0, "reason": ...}` by content-word overlap (>= 0.6 -> 1, >= 0.3 -> 0.5).
- `scripted/faithful`, task `judge`: 1 when every content word of the rubric item is in the
  response, else 0 (the judge check's calibration cases).
- `equivalence`: `YES` or `NO` by overlap of two snippets.
"""

from __future__ import annotations

import json
import re

from clients.llm.port import ChatRequest
from clients.scripted.rules import (
    ScriptedReply,
    content_words,
    find_section,
    labelled_sections,
    last_user_text,
    overlap,
    register_rule,
    with_schema,
)


def judge_rule(request: ChatRequest) -> ScriptedReply:
    sections = labelled_sections(last_user_text(request))
    rubric = find_section(sections, "rubric", "criterion", "check") or ""
    response = find_section(sections, "response", "answer") or ""
    share = overlap(rubric, response)
    score = 1.0 if share >= 0.6 else 0.5 if share >= 0.3 else 0.0
    reason = f"scripted judge: {share:.0%} of the rubric item's content words are in the response"
    verdict = {"score": score, "reason": reason}
    return with_schema(request, verdict, json.dumps(verdict))


_LEAD_IN = re.compile(r"^\s*llm response should \w+\s*:\s*", re.IGNORECASE)


def faithful_judge_rule(request: ChatRequest) -> ScriptedReply:
    """`scripted/faithful`'s judge: all of the item's content words present -> 1, else 0."""
    sections = labelled_sections(last_user_text(request))
    rubric = find_section(sections, "rubric", "criterion", "check") or ""
    response = find_section(sections, "response", "answer") or ""
    wanted = set(content_words(_LEAD_IN.sub("", rubric)))
    missing = sorted(wanted - set(content_words(response)))
    score = 1.0 if wanted and not missing else 0.0
    reason = (
        f"scripted faithful judge: missing {', '.join(missing[:5])}"
        if missing
        else "scripted faithful judge: every content word of the rubric item is in the response"
    )
    verdict = {"score": score, "reason": reason}
    return with_schema(request, verdict, json.dumps(verdict))


def equivalence_rule(request: ChatRequest) -> ScriptedReply:
    sections = labelled_sections(last_user_text(request))
    first = find_section(sections, "first", "expected", "reference", "snippet a") or ""
    second = find_section(sections, "second", "response", "answer", "snippet b") or ""
    shorter, longer = sorted((first, second), key=lambda s: len(content_words(s)))
    same = overlap(shorter, longer) >= 0.5
    return with_schema(request, {"equivalent": same}, "YES" if same else "NO")


register_rule("judge", judge_rule)
register_rule("equivalence", equivalence_rule)
register_rule("judge", faithful_judge_rule, model="scripted/faithful")


# -- the scoring protocols' judge prompts (bench/protocols/): `## HEADING:` sections -------------

_HEADING = re.compile(r"^#{1,6}\s*(.+?):?\s*$")


def heading_sections(text: str) -> dict[str, str]:
    """The text under each `## HEADING:` line, keyed by the lower-case heading (first wins)."""
    sections: dict[str, str] = {}
    heading: str | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), "## end"]:
        match = _HEADING.match(line)
        if match:
            if heading is not None:
                sections.setdefault(heading, "\n".join(lines).strip())
            heading, lines = match.group(1).lower(), []
        else:
            lines.append(line)
    return sections


def protocol_item_rule(request: ChatRequest) -> ScriptedReply:
    """An OmniMemEval or ExaBase rubric-item verdict by content-word overlap, as `judge_rule`."""
    sections = heading_sections(last_user_text(request))
    rubric = find_section(sections, "rubric", "criterion") or ""
    response = find_section(sections, "response", "answer") or ""
    share = overlap(rubric, response)
    score = 1.0 if share >= 0.6 else 0.5 if share >= 0.3 else 0.0
    verdict = {"score": score, "reason": f"scripted protocol judge: {share:.0%} overlap"}
    return with_schema(request, verdict, json.dumps(verdict))


def protocol_order_rule(request: ChatRequest) -> ScriptedReply:
    """OmniMemEval's event placement: each reference event at the first response line that holds
    half its content words (1-based), else -1."""
    sections = heading_sections(last_user_text(request))
    reference = find_section(sections, "reference") or ""
    response = find_section(sections, "response") or ""
    events = [re.sub(r"^\s*\d+\.\s*", "", line) for line in reference.splitlines() if line.strip()]
    lines = [line for line in response.splitlines() if line.strip()]
    positions = [
        next((k for k, line in enumerate(lines, start=1) if overlap(event, line) >= 0.5), -1)
        for event in events
    ]
    placed = [{"event": e, "position": p} for e, p in zip(events, positions, strict=True)]
    return ScriptedReply(text=json.dumps({"positions": placed}))


def protocol_equivalence_rule(request: ChatRequest) -> ScriptedReply:
    """ExaBase's equivalence: the last two `Label: value` lines of the prompt, YES by overlap."""
    values = [v for v in labelled_sections(last_user_text(request)).values() if v]
    first, second = (values[-2], values[-1]) if len(values) >= 2 else ("", "")
    shorter, longer = sorted((first, second), key=lambda s: len(content_words(s)))
    answer = "YES" if overlap(shorter, longer) >= 0.5 else "NO"
    return with_schema(request, {"answer": answer}, json.dumps({"answer": answer}))


register_rule("omnimemeval_judge", protocol_item_rule)
register_rule("exabase_judge", protocol_item_rule)
register_rule("omnimemeval_order", protocol_order_rule)
register_rule("exabase_equivalence", protocol_equivalence_rule)
