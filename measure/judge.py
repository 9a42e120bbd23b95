"""Judge-core benchmark: judge calls per question and scoring time for the full mode's questions.

Reads the real rubrics from ../shared/beam (nothing is copied) and the question ids from
fixtures/slices.json, extracts the prompts from the test stand-in files, and judges with a scripted
judge that answers at once, so the numbers are the scorer's own cost: how many model calls the
rubrics and the event alignment need, and the time spent outside the model. event_ordering
answers are synthesised from the rubric in four shapes (perfect, reversed, shuffled, and with an
invented line after every event), because the call count there depends on the answer.

    uv run python -m measure judge
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from bench.event_order import EVENT_ORDERING
from bench.judge import judge_question, judged_question, summarize
from bench.scorer_prompts import Message, extract_judge_prompts
from schemas.records import Ability, Question, Rubric
from tests.support import scorer_standin as standin

ROOT = Path(__file__).resolve().parent.parent

EVENT: Ability = "event_ordering"
BEAM = ROOT.parent / "shared" / "beam" / "100K"


def load(mode: str) -> list[tuple[Question, Rubric]]:
    pins = json.loads((ROOT / "fixtures" / "slices.json").read_text(encoding="utf-8"))
    pairs = []
    for qid in pins["modes"][mode]["question_ids"]:
        conv, ability, index = qid.split(":")
        conv_id = conv.removeprefix("conv")
        probing = json.loads(
            (BEAM / conv_id / "probing_questions.json").read_text(encoding="utf-8")
        )
        item = probing[ability][int(index)]
        question = Question.model_validate(
            {
                "id": qid,
                "conversation_id": conv_id,
                "ability": ability,
                "index": int(index),
                "question": item["question"],
            }
        )
        rubric = Rubric.model_validate(
            {
                "question_id": qid,
                "ability": ability,
                "rubric": item["rubric"],
                "source_chat_ids": [],
            }
        )
        pairs.append((question, rubric))
    return pairs


def scripted(messages: list[Message]) -> str:
    if messages[0]["role"] == "system":  # equivalence: the two snippets are the same text
        user = messages[1]["content"]
        first = user.split("Snippet A: ", 1)[1].split(" \n", 1)[0]
        second = user.split("Snippet B: ", 1)[1].split("\n", 1)[0]
        return "YES" if first == second else "NO"
    return '{"score": 0.5, "reason": "scripted"}'


def event_answer(events: list[str], shape: str, rng: random.Random) -> str:
    if shape == "perfect":
        lines = list(events)
    elif shape == "reversed":
        lines = list(reversed(events))
    elif shape == "shuffled":
        lines = rng.sample(events, len(events))
    else:  # invented: an extra line after every event
        lines = [x for e in events for x in (e, f"an invented event after {e[:20]}")]
    return "\n".join(f"{n}. {line}" for n, line in enumerate(lines, start=1))


def measure(argv: list[str]) -> dict[str, Any]:
    if not BEAM.is_dir():
        raise SystemExit(f"real BEAM data not found at {BEAM}")
    started = time.perf_counter()
    prompts = extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())
    extract_ms = (time.perf_counter() - started) * 1000
    # The real prompts.py is about 620,000 characters of prompt constants: time that size too.
    padded = standin.prompts_py() + "".join(
        f'filler_{i} = """{"x" * 1000}"""\n' for i in range(620)
    )
    started = time.perf_counter()
    extract_judge_prompts(padded, standin.compute_metrics_py())
    padded_ms = (time.perf_counter() - started) * 1000
    pairs = load("full")
    items = [len(r.rubric) for q, r in pairs if q.ability != EVENT_ORDERING]
    events = [len(r.rubric) for q, r in pairs if q.ability == EVENT_ORDERING]
    figures: dict[str, Any] = {
        "questions": len(pairs),
        "prompt_extraction_ms": round(extract_ms, 1),
        "prompt_extraction_padded_ms": round(padded_ms, 1),
        "padded_characters": len(padded),
        "rubric_items_per_question_mean": round(statistics.mean(items), 2),
        "rubric_items_per_question_max": max(items),
        "events_per_event_question_mean": round(statistics.mean(events), 2),
        "events_per_event_question_max": max(events),
        "shapes": {},
    }
    print(
        f"questions {len(pairs)}; prompt extraction {extract_ms:.1f} ms "
        f"({padded_ms:.1f} ms with prompts.py padded to {len(padded):,} characters)"
    )
    print(
        f"rubric items per non-event question: mean {statistics.mean(items):.2f}, "
        f"max {max(items)}; events per event_ordering question: "
        f"mean {statistics.mean(events):.2f}, max {max(events)}"
    )
    for shape in ("perfect", "reversed", "shuffled", "invented"):
        rng = random.Random(0)
        started = time.perf_counter()
        judgements = []
        for question, rubric in pairs:
            answer = (
                event_answer(rubric.rubric, shape, rng)
                if question.ability == EVENT_ORDERING
                else "scripted answer"
            )
            judgements.append(judge_question(question, rubric, answer, prompts, scripted))
        seconds = time.perf_counter() - started
        # this script prints no protocol score: the rows carry ours in its place
        rows = [
            judged_question(j, [], [], answer_failed=False, score_beam_code=j.score)
            for j in judgements
        ]
        metrics = summarize(judgements, [r for _, r in pairs], rows)
        event_calls = [j.calls for j in judgements if j.ability == EVENT_ORDERING]
        figures["shapes"][shape] = {
            "judge_calls_per_question": metrics.overall.judge_calls_per_question,
            "event_calls_mean": round(statistics.mean(event_calls), 1),
            "event_calls_max": max(event_calls),
            "event_score": metrics.abilities[EVENT].score,
            "scoring_ms": round(seconds * 1000),
        }
        print(
            f"{shape:9s} calls/question {metrics.overall.judge_calls_per_question or 0:.2f} "
            f"(event_ordering mean {statistics.mean(event_calls):.1f}, max {max(event_calls)}); "
            f"event score {metrics.abilities['event_ordering'].score or 0:.3f}; "
            f"scoring time {seconds * 1000:.0f} ms for {len(pairs)} questions"
        )
    return figures
