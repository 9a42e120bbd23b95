"""The data-leak check: no prompt the answer model is sent may hold what only the judge should see.

Gold is what the slice stage writes for the judge and never for a system: each question's rubric
(the items it is scored against, the messages it cites) and its ability. A memory system that
read it (from the rubrics file, a fixture, the question id) would score well for no merit of its
memory. The answer stage wraps the answer model once per question (`LeakWatch.watch`) and scans
every request the system sends through it, served from the call cache or not, for that
question's gold-only texts:
- each rubric item (case folded, whitespace collapsed) of at least `MIN_RUBRIC_CHARS`
  characters: the judge's wording (`LLM response should state: ...`), or an event of an
  ordering question;
- the question's judge-side annotations (`Rubric.annotations`: each ordering_tested item, time
  point, compliance indicator, the why_unanswerable, calculation_required,
  preference_being_tested and instruction_being_tested texts) of at least `MIN_ANNOTATION_CHARS`
  characters, and a summary's rubric items past the judge's lead (`LLM response should
  contain: `), as ExaBase's answer prompt quotes them;
- the ability label where it is snake_case (`temporal_reasoning`; `abstention` and
  `summarization` are ordinary words, caught only inside the question id), and the question id
  (`conv1:temporal_reasoning:0`);
a text counting as gold-only only where neither the conversation's chat nor the question holds it
(a rubric that quotes the chat is no leak when a system shows the chat). Every part of a request
is read: each message's text (system, user, the model's own turns, tool results) and the tools'
descriptions. The stage writes what it found (`schemas/leak_check.py`), and the report and the
page say per run: `clean`, `reads gold by design` (a system that declares it, systems/port.py
`reads_gold`: the oracle, whose prompts hold the cited messages, chat text, so the scan alone
would pass it), `annotations given by design` (params `answer.protocol: exabase`: ExaBase's
answer prompt hands the answerer the annotations, so the findings are that protocol's, counted
and shown, not a system's leak), or `LEAK` with what was found.

Its limits: it finds gold quoted verbatim (after case and whitespace), not paraphrased, cut
short or encoded; nor the cited message ids used to choose which chat to show (that is the
oracle's design, which only its declaration reveals), nor an answer copied from a rubric item
whose words are all in the chat. Short rubric items (under `MIN_RUBRIC_CHARS`) are left out, as
a model's own words may match them. Only the answer model's requests through the harness are
read: the build's calls (ingest), an embedder's texts, and a system that calls a model by a
route of its own are not. A finding is a pointer for a person to read the prompt, not proof.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.layout import LAYOUT
from schemas.leak_check import GoldKind, LeakCheck, LeakFinding, PromptPart
from schemas.records import ChatSlice, Question, Rubric

if TYPE_CHECKING:  # the run's page renders `leak_verdict` and imports no model door
    from clients.llm.port import ChatModel, ChatRequest, Completion

MIN_RUBRIC_CHARS = 24
"""Rubric items shorter than this (normalized) are not looked for: `core functionality` may be a
graph's own entity name, while `llm response should state: 8 weeks` is the judge's wording."""
MIN_ANNOTATION_CHARS = 12
"""Annotations shorter than this are not looked for; shorter than rubric items' floor because an
event to order reads `1st: Core functionality` (the dataset's wording, its ordinal included)."""
SHOWN_CHARS = 120
"""A finding's text is cut to this many characters in the record's line."""


def normalize(text: str) -> str:
    """Case folded, every run of whitespace one space: what the scan compares."""
    return " ".join(text.casefold().split())


def chat_text(chat: ChatSlice) -> str:
    """A conversation's messages, normalized, as one text (what a system may show of it)."""
    return normalize("\n".join(m.content for s in chat.sessions for m in s.messages))


@dataclass(frozen=True)
class GoldText:
    kind: GoldKind
    text: str
    """Normalized."""


def gold_texts(question: Question, rubric: Rubric | None, chat: str) -> tuple[GoldText, ...]:
    """The gold-only texts of one question: its rubric items (long enough), its snake_case
    ability label and its id, less any the chat (normalized, `chat_text`) or the question hold."""
    candidates: list[GoldText] = []
    if rubric is not None:
        items = [normalize(item) for item in rubric.rubric]
        if question.ability == "summarization":  # as ExaBase's answer prompt quotes them
            items += [item.split(": ", 1)[1] for item in items if ": " in item]
        candidates += [GoldText("rubric_item", t) for t in items if len(t) >= MIN_RUBRIC_CHARS]
        notes = (normalize(n) for n in annotation_texts(rubric))
        candidates += [GoldText("annotation", t) for t in notes if len(t) >= MIN_ANNOTATION_CHARS]
    if "_" in question.ability:
        candidates.append(GoldText("ability_label", question.ability))
    candidates.append(GoldText("question_id", normalize(question.id)))
    asked = normalize(question.question)
    unique = dict.fromkeys(candidates)
    return tuple(g for g in unique if g.text not in chat and g.text not in asked)


def annotation_texts(rubric: Rubric) -> list[str]:
    """Each annotation of a question as a text: a string whole, a list item by item."""
    return [
        text
        for value in rubric.annotations.values()
        for text in ([value] if isinstance(value, str) else value)
    ]


def request_parts(request: ChatRequest) -> Iterable[tuple[PromptPart, str]]:
    """Every text of a request the model reads, normalized, with where it is."""
    for message in request.messages:
        if message.content:
            yield message.role, normalize(message.content)
        for call in message.tool_calls:
            yield message.role, normalize(call.raw_arguments)
    for tool in request.tools:
        yield "tool_description", normalize(tool.description)


def find_gold(
    question_id: str, request: ChatRequest, gold: Sequence[GoldText]
) -> list[LeakFinding]:
    """The gold-only texts a request holds, each once (at its first part)."""
    found: dict[GoldText, PromptPart] = {}
    for part, text in request_parts(request):
        for item in gold:
            if item not in found and item.text in text:
                found[item] = part
    return [
        LeakFinding(question_id=question_id, kind=g.kind, text=g.text, part=part)
        for g, part in found.items()
    ]


class WatchedModel:
    """The answer model for one question: each request scanned, then passed on unchanged."""

    def __init__(self, model: ChatModel, scan: Callable[[ChatRequest], None]) -> None:
        self.model = model
        self.role = model.role
        self.test_model = model.test_model
        self._scan = scan

    def complete(self, request: ChatRequest) -> Completion:
        self._scan(request)
        return self.model.complete(request)

    def run_batch(
        self,
        requests: Sequence[ChatRequest],
        on_done: Callable[[Completion], None] | None = None,
    ) -> list[Completion]:
        for request in requests:
            self._scan(request)
        return self.model.run_batch(requests, on_done)

    async def acomplete(self, request: ChatRequest) -> Completion:
        self._scan(request)
        return await self.model.acomplete(request)

    def __getattr__(self, name: str) -> Any:  # the rest of the client (its window, ...)
        return getattr(self.model, name)


class LeakWatch:
    """The scan of a run's answer-model requests, per question (thread-safe: questions are
    answered concurrently)."""

    def __init__(self, gold: Mapping[str, Sequence[GoldText]]) -> None:
        self.gold = dict(gold)
        self._lock = threading.Lock()
        self._prompts = 0
        self._found: dict[tuple[str, GoldKind, str], LeakFinding] = {}

    @classmethod
    def of(
        cls, questions: Sequence[Question], rubrics: Sequence[Rubric], chats: Sequence[ChatSlice]
    ) -> LeakWatch:
        """The gold-only texts of every question, from the slice's rubrics and chats."""
        by_rubric = {r.question_id: r for r in rubrics}
        texts = {c.conversation_id: chat_text(c) for c in chats}
        return cls(
            {
                q.id: gold_texts(q, by_rubric.get(q.id), texts.get(q.conversation_id, ""))
                for q in questions
            }
        )

    def scan(self, question_id: str, request: ChatRequest) -> None:
        findings = find_gold(question_id, request, self.gold.get(question_id, ()))
        with self._lock:
            self._prompts += 1
            for f in findings:
                self._found.setdefault((f.question_id, f.kind, f.text), f)

    def watch(self, question: Question, model: ChatModel) -> ChatModel:
        """The model a system answers `question` with: every request it sends is scanned."""
        return WatchedModel(model, lambda request: self.scan(question.id, request))

    def result(self) -> LeakCheck:
        with self._lock:
            return LeakCheck(
                questions=len(self.gold),
                prompts=self._prompts,
                gold_texts=sum(len(g) for g in self.gold.values()),
                findings=[self._found[k] for k in sorted(self._found)],
            )


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def leak_verdict(check: LeakCheck | None, reads_gold: bool, annotated: bool = False) -> str:
    """The run's leak check in one line: `clean`, `reads gold by design`, `annotations given by
    design` (`annotated`: the run's answer protocol hands the answerer the judge-side
    annotations), or `LEAK: ...`."""
    if check is None:
        return "not run (the answer stage wrote no leak check: a run made before it)"
    scanned = (
        f"{check.prompts:,} answer-model prompts of {check.questions:,} questions scanned for "
        f"{check.gold_texts:,} gold-only texts"
    )
    if annotated:
        flagged = len({f.question_id for f in check.findings})
        return (
            "annotations given by design (answer.protocol exabase: the answerer saw judge-side "
            f"annotations; gold-only text in the prompts of {flagged} question(s), "
            f"{len(check.findings)} finding(s); {scanned})"
        )
    if check.findings:
        questions = sorted({f.question_id for f in check.findings})
        shown = "; ".join(
            f"{f.question_id}: {f.kind.replace('_', ' ')} '{_cut(f.text)}' in a {f.part} part"
            for f in check.findings[:3]
        )
        more = f"; and {len(check.findings) - 3} more" if len(check.findings) > 3 else ""
        declared = " (the system also reads gold by design)" if reads_gold else ""
        return (
            f"LEAK: gold-only text in the prompts of {len(questions)} question(s){declared}: "
            f"{shown}{more} ({scanned}; {LAYOUT.answer.leak_check.as_posix()} lists them all)"
        )
    if reads_gold:
        return (
            "reads gold by design (the system declares `reads_gold`: its prompts hold each "
            f"question's cited messages; {scanned}, none found)"
        )
    return f"clean ({scanned}, none found)"
