"""Benchmark of the run viewer (`commands/viewer.py`) on a full-size run: page size and load time.

Writes a synthetic run of the full set's size into a work folder (temporary unless --workdir):
5 conversations of 1,254 messages in 21 sessions (about 2.3 million characters, as the full
slice), 100 questions (2 per ability and conversation) with rubrics of 1 to 6 items, agent traces
of 1 to 4 turns with tool results cut at the trace's limit, judge replies, event alignments, and
the metrics files the report stage writes. The texts are random words (with a few HTML and
`</script>` strings, which the page must show as text); the sizes are what matters here.

Reported: the time to build the page in Python, its size in bytes, and, with headless Chromium
(`/usr/bin/chromium`, or BEAM_CHROMIUM; skipped where absent), the load time (navigation start to
the load event, which is after the page's script has drawn it) and the time to open every
question.

    uv run python -m measure viewer [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from clients.files import write_json, write_jsonl
from commands.viewer import write_page
from schemas.judging import EventAlignment, ItemScore, Judgement
from schemas.records import (
    ABILITIES,
    ChatMessage,
    ChatSlice,
    Question,
    Rubric,
    Session,
)
from schemas.roles import COST_KEYS
from schemas.traces import RESULT_CHARS, ToolCallRecord, Trace
from stages.common import read_params

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = {"1": 5, "4": 4, "6": 4, "13": 4, "17": 4}  # sessions each: 21 in all
MESSAGES = 1254
MESSAGE_CHARS = 1810  # about 568k tokens of chat at ~4 characters a token
VOCABULARY = (
    "budget apartment lease moved Berlin March kids school Tuesday Thursday pilot episode scenes "
    "filmed deadline July team meeting coffee green tea prefer running marathon training plan "
    "doctor appointment project launch design review customer feedback salary negotiation "
    "garden tomatoes vacation Lisbon flight hotel booking recipe pasta café naïve résumé "
    "<b>bold</b> </script> <img src=x onerror=alert(1)> & 'quote' \"double\""
)
WORDS = VOCABULARY.split()


def words(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def chats(rng: random.Random) -> list[ChatSlice]:
    per_session = MESSAGES // sum(CONVERSATIONS.values())
    extra = MESSAGES - per_session * sum(CONVERSATIONS.values())
    slices = []
    for conversation, sessions in CONVERSATIONS.items():
        built, next_id = [], 0
        for number in range(1, sessions + 1):
            count = per_session + (1 if extra > 0 else 0)
            extra -= 1 if extra > 0 else 0
            messages = [
                ChatMessage(
                    id=next_id + k,
                    role="user" if k % 2 == 0 else "assistant",
                    content=words(rng, int(rng.uniform(0.3, 1.7) * MESSAGE_CHARS)),
                )
                for k in range(count)
            ]
            next_id += count
            built.append(
                Session(
                    number=number,
                    date=f"March-{number:02d}-2024",
                    date_iso=f"2024-03-{number:02d}",
                    messages=messages,
                )
            )
        slices.append(ChatSlice(conversation_id=conversation, sessions=built))
    return slices


def question_records(
    rng: random.Random, slices: list[ChatSlice]
) -> tuple[list[Question], list[Rubric], list[Trace], list[Judgement], list[dict[str, Any]]]:
    questions, rubrics, traces, judgements, rows = [], [], [], [], []
    for chat in slices:
        ids = [m.id for s in chat.sessions for m in s.messages]
        for ability in ABILITIES:
            for index in range(2):
                qid = f"conv{chat.conversation_id}:{ability}:{index}"
                questions.append(
                    Question(
                        id=qid,
                        conversation_id=chat.conversation_id,
                        ability=ability,
                        index=index,
                        question=words(rng, rng.randint(60, 240)) + "?",
                    )
                )
                needed = (
                    [] if ability == "abstention" else sorted(rng.sample(ids, rng.randint(1, 4)))
                )
                items = [
                    f"LLM response should state: {words(rng, 60)}" for _ in range(rng.randint(1, 6))
                ]
                rubrics.append(
                    Rubric(question_id=qid, ability=ability, rubric=items, source_chat_ids=needed)
                )
                records, texts = [], []
                for turn in range(rng.randint(1, 4)):
                    texts.append(words(rng, rng.randint(0, 200)) if rng.random() < 0.5 else "")
                    for _ in range(rng.randint(1, 3)):
                        reached = sorted(rng.sample(ids, rng.randint(0, 8)))
                        records.append(
                            ToolCallRecord(
                                name="search_memory",
                                arguments={"query": words(rng, 40), "kind": "all"},
                                raw_arguments="{}",
                                ids=[f"conv{chat.conversation_id}:fact:{m}" for m in reached],
                                message_ids=reached,
                                result=words(rng, RESULT_CHARS),
                                turn=turn,
                            )
                        )
                answer = "\n".join(words(rng, 120) for _ in range(rng.randint(1, 8)))
                traces.append(
                    Trace(
                        question_id=qid,
                        answer=answer,
                        tool_calls=records,
                        turn_texts=texts,
                        reached_ids=sorted({i for r in records for i in r.ids}),
                        reached_message_ids=sorted({m for r in records for m in r.message_ids}),
                        steps=len(records),
                        calls=len(texts) + 1,
                        prompt_tokens=4000,
                        completion_tokens=300,
                        max_context_tokens=2500,
                        test_model=True,
                    )
                )
                scores = [rng.choice([0.0, 0.5, 1.0]) for _ in items]
                event = None
                if ability == "event_ordering":
                    lines = answer.splitlines()
                    free = list(range(len(items)))
                    matches = [free.pop(0) if free and rng.random() < 0.6 else None for _ in lines]
                    event = EventAlignment(
                        answer_lines=lines,
                        matches=matches,
                        calls=len(lines) * len(items),
                        failed_calls=0,
                        precision=0.5,
                        recall=0.5,
                        f1=0.5,
                        tau_b=0.2,
                        tau_norm=0.6,
                    )
                    scores = [1.0 if i in matches else 0.0 for i in range(len(items))]
                judgement_items = [
                    ItemScore(
                        rubric_item=item,
                        score=s,
                        reason=words(rng, rng.randint(40, 200)),
                        reply=None
                        if event
                        else json.dumps({"score": s, "reason": words(rng, 150)}),
                    )
                    for item, s in zip(items, scores, strict=True)
                ]
                score = sum(scores) / len(scores)
                judgements.append(
                    Judgement(
                        question_id=qid,
                        ability=ability,
                        items=judgement_items,
                        score=score,
                        score_excluding_known_bad=score,
                        event=event,
                        flags=[],
                        calls=len(items),
                    )
                )
                reached_set = set(traces[-1].reached_message_ids)
                rows.append(
                    {
                        "question_id": qid,
                        "ability": ability,
                        "score": score,
                        "score_excluding_known_bad": score,
                        "score_beam_code": score,
                        "flags": ["parse_error"] if rng.random() < 0.05 else [],
                        "evidence_recall": len(set(needed) & reached_set) / len(needed)
                        if needed
                        else None,
                        "judge_calls": len(items),
                    }
                )
    return questions, rubrics, traces, judgements, rows


def write_run(folder: Path, seed: int = 0) -> None:
    """A full-size synthetic run in `folder`, laid out as the pipeline leaves it."""
    rng = random.Random(seed)
    for name in ("params.yaml", "settings.yaml", "pins.yaml"):  # the page reads two of the params
        shutil.copy(ROOT / name, folder / name)
    slices = chats(rng)
    questions, rubrics, traces, judgements, rows = question_records(rng, slices)
    for chat in slices:
        path = folder / "data/slice/chats" / f"conv{chat.conversation_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(chat.model_dump_json(), encoding="utf-8")
    write_jsonl(folder / "data/slice/questions.jsonl", questions)
    write_jsonl(folder / "data/slice/rubrics.jsonl", rubrics)
    write_jsonl(folder / "data/answer/traces.jsonl", traces)
    write_jsonl(folder / "data/judge/judgements.jsonl", judgements)
    write_jsonl(folder / "data/judge/questions.jsonl", rows)
    groups = [*ABILITIES, "overall"]
    mean = statistics.fmean(r["score"] for r in rows)
    keys = (*COST_KEYS, "total")
    write_json(
        folder / "metrics/report.json",
        {
            "score": dict.fromkeys(groups, mean),
            "score_ci_low": dict.fromkeys(groups, mean - 0.1),
            "score_ci_high": dict.fromkeys(groups, mean + 0.1),
            "score_excluding_known_bad": dict.fromkeys(groups, mean),
            "evidence_recall": dict.fromkeys(groups, 0.5),
            "questions": {**dict.fromkeys(ABILITIES, 10), "overall": 100},
            "score_beam_code": dict.fromkeys(groups, mean),
            "cost_calls": dict.fromkeys(keys, 1000),
            "cost_tokens": dict.fromkeys(keys, 1_000_000),
            "failures": dict.fromkeys(
                ("extraction_calls", "resolution_calls", "questions_in_error", "judge_calls"), 0
            )
            | {"tool_errors": 3},
        },
    )
    counts = {"chunks": 150, "entities": 160, "statements": 330, "relationships": 1500}
    write_json(
        folder / "data/ingest/graphs.json",
        {f"conv{c}": counts for c in CONVERSATIONS} | {"total": counts},
    )
    events = {"event_ordering": {"event_f1": 0.5, "event_tau_norm": 0.6}}
    write_json(folder / "data/judge/summary.json", events)
    for stage, role in (("ingest", "extraction"), ("answer", "agent"), ("judge", "judge")):
        model = {"role": role, "model": "scripted/rules", "api_base": None, "test_model": True}
        write_json(folder / f"data/{stage}/run.json", {"mode": "full", "models": [model]})


def browser_times(page_file: Path) -> dict[str, float] | None:
    """Load time (navigation start to load event, in the browser) and the time to open every
    question, in milliseconds; None where there is no Chromium."""
    chromium = os.environ.get("BEAM_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        return None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium)
        try:
            loads = []
            for _ in range(5):
                page = browser.new_page()
                page.goto(page_file.resolve().as_uri(), wait_until="load")
                loads.append(
                    page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
                )
                page.close()
            page = browser.new_page()
            page.goto(page_file.resolve().as_uri(), wait_until="load")
            opened = page.evaluate(
                """() => { const t = performance.now();
                document.querySelectorAll('details.q').forEach((d) => { d.open = true; });
                return new Promise((done) => requestAnimationFrame(() => setTimeout(
                  () => done([performance.now() - t,
                              document.querySelectorAll('details.q .body').length]), 0)));
                }"""
            )
        finally:
            browser.close()
    return {
        "load_ms_median": statistics.median(loads),
        "open_all_ms": opened[0],
        "bodies": opened[1],
    }


def measure(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="keep the synthetic run here")
    args = parser.parse_args(argv)
    folder = args.workdir or Path(tempfile.mkdtemp(prefix="beam-viewer-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    write_run(folder)
    here = Path.cwd()
    os.chdir(folder)
    try:
        started = time.perf_counter()
        page = write_page(read_params(), Path("reports/run.html"))
        build = time.perf_counter() - started
        size = page.stat().st_size
        times = browser_times(page)
    finally:
        os.chdir(here)
    chat_chars = sum(
        len(m.content)
        for f in sorted((folder / "data/slice/chats").glob("*.json"))
        for s in ChatSlice.model_validate_json(f.read_text(encoding="utf-8")).sessions
        for m in s.messages
    )
    print(f"full-size synthetic run in {folder}: 100 questions, {chat_chars:,} characters of chat")
    print(f"build: {build:.2f} s (Python: read the files, render, write)")
    print(f"page: {size:,} bytes ({size / 1024 / 1024:.2f} MiB)")
    if times is None:
        print("load: no Chromium (apt-get install chromium, or set BEAM_CHROMIUM)")
    else:
        print(
            f"load: {times['load_ms_median']:.0f} ms median of 5 (navigation start to load "
            f"event); opening all {times['bodies']:.0f} questions: {times['open_all_ms']:.0f} ms"
        )
    if args.workdir is None:
        shutil.rmtree(folder)
    return {
        "questions": 100,
        "chat_characters": chat_chars,
        "build_seconds": round(build, 2),
        "page_bytes": size,
        "load_ms_median": None if times is None else round(times["load_ms_median"]),
        "open_all_ms": None if times is None else round(times["open_all_ms"]),
    }
