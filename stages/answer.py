"""answer: the system under test answers each question from its conversation's memory.

Per conversation: the system (params `system`, systems/port.py) opens the memory the ingest stage
built (graphrag: its own Neo4j with the graph imported; rag: a BM25 index of the chunks;
full_context: the transcript; no_memory: nothing), answers that conversation's questions with
the agent's model in the run's answer regime (params `answer.regime`, systems/regimes.py: the
system's own answer, one call from its own search, or the agent loop over its own search),
`llm.concurrency` at a time, and closes it; `parallel.conversations` conversations are open at
once (settings.yaml; 1 for a system that does not declare `overlaps`), their questions sharing
those `llm.concurrency` threads, and collected in conversation order. Every request the
system sends the answer model is scanned for the question's gold-only text (its rubric items,
its ability: bench/leak_check.py; the stage reads the slice's rubrics and chats for that, the
system never gets them). Writes
`data/answer/traces.jsonl` (one `Trace` per question, in question order), a NOTICE beside it
(traces quote the chat: CC BY-SA 4.0), `data/answer/leak_check.json` (what the scan found),
`data/answer/run.json` (the system, the regime it answered in, the model, whether the system
reads gold evidence by design: systems/port.py `reads_gold`, and the answer protocol: params
`answer.protocol`; under `exabase` each question carries ExaBase's guidance, built from the
judge-side annotations of the slice's rubrics with the pinned answer_prompt the fetch stage put in
data/protocols: bench/protocols/answering.py),
`data/answer/summary.json` (counts, steps, the context size and the tokens left out),
`metrics/usage/answer.json` (the model calls and tokens the answers took),
`metrics/wall_time/answer_questions.jsonl` (each question's answer and retrieval seconds) and
`metrics/wall_time/answer.json` (the stage's and the phase's seconds, the questions' median and
p95: wall time never goes into a result; schemas/wall_time.py).
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path

from bench.answers import agent_usage, summarize_answers
from bench.leak_check import LeakWatch
from bench.usage import CountedEmbedder
from bench.wall_time import DIGITS, answer_wall_time
from clients.files import (
    read_chats,
    read_jsonl,
    read_records,
    write_json,
    write_jsonl,
)
from clients.llm.accounting import Spend
from clients.llm.port import ChatModel
from clients.workdir import stage_workdir
from schemas.errors import DataError
from schemas.layout import LAYOUT, StageIO
from schemas.params import JudgeParams
from schemas.records import Question, Rubric
from schemas.runs import StageRun
from schemas.traces import Trace
from schemas.wall_time import QuestionTime
from stages.common import (
    ModelStage,
    conversations_at_once,
    progress,
    read_params,
    read_protocol_source,
    run_overlapping,
    run_stage,
    wait_shielded,
)
from systems.port import (
    EmbedsQuestions,
    Memory,
    MemorySystem,
    memory_file,
    overlaps,
    question_clock,
    reads_gold,
    times_search,
)
from systems.regimes import effective_regime, in_regime, regime_estimate
from systems.registry import lazy_embedder, load_system, system_entry

STAGE_IO = StageIO(
    deps=(LAYOUT.slice.folder, LAYOUT.ingest.folder),
    outs=(
        LAYOUT.answer.folder,
        LAYOUT.answer.usage,
        LAYOUT.answer.wall_time,
        LAYOUT.answer.question_times,
    ),
)

FILES = LAYOUT.answer
MEMORIES = LAYOUT.ingest.folder
NOTICE = """The traces in this folder quote and adapt the chat of BEAM (Tavakoli et al.,
Hugging Face dataset Mohammadta/BEAM), licensed CC BY-SA 4.0
(https://creativecommons.org/licenses/by-sa/4.0/). They are adapted material under the same
licence: share them only under CC BY-SA 4.0, with this attribution.
"""


def answer_timed(
    memory: Memory, question: Question, model: ChatModel
) -> tuple[Trace, QuestionTime]:
    """One question's trace, and the wall time of its answer and of the searches the system
    timed on this thread's question clock (systems/port.py)."""
    with question_clock() as clock:
        started = time.perf_counter()
        trace = memory.answer(question, model)
        seconds = time.perf_counter() - started
    retrieval = clock.retrieval_seconds(times_search(memory))
    return trace, QuestionTime(
        question_id=question.id,
        conversation_id=question.conversation_id,
        answer_seconds=round(seconds, DIGITS),
        retrieval_seconds=None if retrieval is None else round(retrieval, DIGITS),
    )


def answer_all(
    memory: Memory,
    questions: list[Question],
    model: ChatModel,
    concurrency: int,
    desc: str,
    watch: LeakWatch | None = None,
) -> list[tuple[Trace, QuestionTime]]:
    """The traces of one conversation's questions with their wall times, in question order,
    `concurrency` at a time (each question's calls stay in sequence; the model layer bounds
    requests per endpoint); with `watch`, each question's requests are scanned for its gold-only
    text."""

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="beam-answer") as pool:
        return answer_in(pool, memory, questions, model, desc, watch)


def answer_in(
    pool: Executor,
    memory: Memory,
    questions: list[Question],
    model: ChatModel,
    desc: str,
    watch: LeakWatch | None = None,
) -> list[tuple[Trace, QuestionTime]]:
    """`answer_all` on a question pool the caller holds (shared by the conversations open at
    once, so that `llm.concurrency` bounds the questions in flight however many are open); on
    any failure (a dead graph server, the budget, a pool shut down because the stage stops) no
    further question of this memory is asked, and this returns only once its questions in
    flight have ended (they use its server)."""

    def model_for(question: Question) -> ChatModel:
        return watch.watch(question, model) if watch is not None else model

    futures: list[Future[tuple[Trace, QuestionTime]]] = []
    try:
        futures += [pool.submit(answer_timed, memory, q, model_for(q)) for q in questions]
        return list(progress((f.result() for f in futures), total=len(futures), desc=desc))
    except BaseException:
        for future in futures:
            future.cancel()
        wait_shielded(futures)
        raise


def answer_conversations(
    system: MemorySystem,
    by_conversation: dict[str, list[Question]],
    model: ChatModel,
    concurrency: int,
    regime: Callable[[Memory], Memory] = lambda memory: memory,
    watch: LeakWatch | None = None,
    at_once: int = 1,
) -> dict[str, tuple[Trace, QuestionTime]]:
    """Every question's trace and wall time, each conversation answered from its own memory (as
    `regime` makes it answer), `at_once` conversations open at a time (stages/common.py
    `run_overlapping`), their questions `concurrency` at a time in all."""

    def answer_one(conversation: str) -> list[tuple[Trace, QuestionTime]]:
        asked = by_conversation[conversation]
        memory_path = memory_file(MEMORIES, conversation)
        with system.open_memory(conversation, memory_path, Path(workdir)) as memory:
            timed = answer_in(pool, regime(memory), asked, model, f"conv{conversation}", watch)
        done = [t for t, _ in timed]
        print(
            f"answer conv{conversation} ({system.name}): {len(done)} questions, "
            f"{sum(t.calls for t in done)} model calls, "
            f"{sum(1 for t in done if t.error)} errors",
            file=sys.stderr,
        )
        return timed

    def stop() -> None:  # the questions not yet asked are never asked
        pool.shutdown(wait=False, cancel_futures=True)

    with (
        stage_workdir("beam-answer-") as workdir,
        ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="beam-answer") as pool,
    ):
        conversations = sorted(by_conversation, key=int)
        answers = run_overlapping(conversations, answer_one, at_once, on_stop=stop)
    return {t.question_id: (t, time_) for timed in answers for t, time_ in timed}


def guided_questions(
    judge: JudgeParams, by_conversation: dict[str, list[Question]], rubrics: list[Rubric]
) -> dict[str, list[Question]]:
    """Each question with ExaBase's guidance (params `answer.protocol: exabase`), from its
    pinned file (fetched by the fetch stage, hash-checked here) and the judge-side rubrics."""
    from bench.protocols.answering import read_answering
    from bench.protocols.base import check_source

    pin = judge.protocol_sources.get("exabase")
    if pin is None:
        raise DataError("answer.protocol exabase: pins.yaml judge.protocol_sources has no exabase")
    answering = read_answering(check_source("exabase", pin, read_protocol_source(judge, "exabase")))
    by_id = {r.question_id: r for r in rubrics}
    missing = [q.id for qs in by_conversation.values() for q in qs if q.id not in by_id]
    if missing:
        raise DataError(f"no rubric for {', '.join(missing[:3])} in {LAYOUT.slice.rubrics}")
    return {c: answering.guide(qs, by_id) for c, qs in by_conversation.items()}


def main() -> None:
    run = read_params()
    params, concurrency = run.answer, run.llm.concurrency
    stage = ModelStage("answer", run, FILES, params.max_failed_share)
    questions = read_jsonl(LAYOUT.slice.questions, Question)
    by_conversation: dict[str, list[Question]] = defaultdict(list)
    for question in questions:
        by_conversation[question.conversation_id].append(question)
    agent = stage.open_model("agent")
    embedder = CountedEmbedder(lazy_embedder(run, stage.accounting))
    system = load_system(run, answer_model=agent, embedder=lambda: embedder)
    missing = [c for c in by_conversation if not memory_file(MEMORIES, c).is_file()]
    if missing:
        raise DataError(
            f"no {system.memory_noun} for conversation(s) {', '.join(missing)} in {MEMORIES} "
            f"(system {system.name}): run `dvc repro ingest`"
        )
    stage.remove_outs(FILES.question_times)

    native = system_entry(system.name).native_regime
    regime = effective_regime(params.regime, native)
    stage.check_endpoints([agent])
    estimate = regime_estimate(  # from the built memories
        system.estimate_answer([], questions, MEMORIES),
        native,
        regime,
        run.estimate.agent,
        params.max_steps,
    )
    if isinstance(system, EmbedsQuestions):  # the questions' embeddings, charged to one cap
        estimate += system.estimate_query_embedding(questions)
    planned = Spend(estimate.calls, estimate.tokens)
    stage.check_estimate([agent], planned, f"answer ({run.mode}, {system.name}, {regime})")

    rubrics = read_records(LAYOUT.slice.rubrics, Rubric)
    watch = LeakWatch.of(questions, rubrics, read_chats(LAYOUT.slice.chats))
    if params.protocol == "exabase":  # leaky by design: marked in the record (`annotated`)
        by_conversation = guided_questions(run.judge, by_conversation, rubrics)
    answered = answer_conversations(
        system,
        by_conversation,
        agent,
        concurrency,
        lambda memory: in_regime(memory, system.name, native, params),
        watch,
        conversations_at_once(run, overlaps(system), "answer"),
    )
    ordered = [answered[q.id][0] for q in questions]
    failed = [t for t in ordered if t.error is not None]
    stage.check_failures(
        "questions", len(failed), len(ordered), failed[-1].error if failed else None
    )
    write_jsonl(FILES.traces, ordered)
    (FILES.folder / "NOTICE").write_text(NOTICE, encoding="utf-8")
    write_json(FILES.leak_check, watch.result().model_dump(mode="json"))
    models = [agent.metadata(), *([embedder.metadata()] if embedder.opened else [])]
    record = StageRun(
        mode=run.mode,
        system=system.name,
        regime=regime,
        native_regime=regime == native,
        models=models,
        test_model=any(m.test_model for m in models),
        reads_gold=reads_gold(system),
        answer_protocol=params.protocol,
    )
    write_json(FILES.summary, summarize_answers(ordered).to_json())
    usage = {"agent": agent_usage(ordered)}
    usage |= {"embedding": embedder.usage()} if embedder.opened else {}
    stage.write_run(record, usage)
    times = [answered[q.id][1] for q in questions]
    write_jsonl(FILES.question_times, times)
    seconds = stage.seconds({"agent": "agent"})
    write_json(FILES.wall_time, answer_wall_time(seconds, times).model_dump(mode="json"))


if __name__ == "__main__":
    run_stage(main)
