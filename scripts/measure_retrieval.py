"""rag's retrieval alone: recall@k of each question's cited messages, per retriever and ability.

On a tier's whole split (100K: 20 conversations, 400 questions, as mode `all`), with the tier's
pinned repairs and graphrag's chunks (`ingest.chunk_tokens`), every question is ranked against its
conversation's chunks by bm25, dense (a chunk's best message) and hybrid exactly as
systems/rag.py ranks them, and
recall@k is the share of its rubric's `source_chat_ids` among the messages of the first k chunks
(systems/retrieval.py `recall_at_k`). Questions that cite no message (abstention's) have no
recall and are left out of the means; their count is printed. No chat model is called: this is a
real quality number of the retrieval that rag puts before the answer model (k = `rag.top_k` is
its evidence recall), whatever the embedder, and a check that costs no answer model.

The embedder is `--embedder` (default `local/all-minilm-l6-v2`, which the harness serves itself:
`make local-model` fetches it once) through the model door with the call cache of the checkout
(.cache/llm), so a second run embeds nothing; its wall time and the texts and tokens it embedded
are printed. `--embedder scripted/hash` runs it with the test embedder (measures nothing).
Needs ../shared/beam (the Hub layout copy of the release).
Usage: `uv run python scripts/measure_retrieval.py [--tier 100K] [--embedder NAME] [--k 5 10 20]`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.repair import encode_table, load_table, repair_table  # noqa: E402
from bench.slice import Built, build_mode, rows_by_conversation  # noqa: E402
from clients.llm.embeddings import build_embedder  # noqa: E402
from clients.tokens import count_tokens  # noqa: E402
from measure.tiers import whole_split as every_question  # noqa: E402
from schemas.params import RETRIEVERS, ModelRef, Params, Tier  # noqa: E402
from schemas.records import ABILITIES, Question  # noqa: E402
from stages.common import read_params  # noqa: E402
from systems.chunking import chunk_conversation  # noqa: E402
from systems.rag import ChunkIndex, message_texts, rank_chunks  # noqa: E402
from systems.retrieval import recall_at_k  # noqa: E402
from tests.conftest import SHARED_BEAM  # noqa: E402

MIRROR = SHARED_BEAM / "mirror" / "datasets" / "Mohammadta" / "BEAM" / "data"


def whole_split(params: Params, tier: Tier) -> Built:
    """The tier's conversations whole with every question (as mode `all`), repairs applied."""
    parquet = MIRROR / f"{tier}-00000-of-00001.parquet"
    if not parquet.is_file():
        raise SystemExit(f"{parquet} is missing: this script needs ../shared/beam")
    table = load_table(parquet.read_bytes(), str(parquet))
    repaired, _ = repair_table(table, params.repair.messages, tier, str(parquet))
    rows = rows_by_conversation(encode_table(repaired), parquet)
    return build_mode(rows, every_question(rows), {}, params.slice.tokenizer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tier", default="100K")
    parser.add_argument("--embedder", default="local/all-minilm-l6-v2")
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    params = read_params(ROOT / "params.yaml")
    built = whole_split(params, args.tier)
    models = params.models.model_copy(
        update={"embedding": ModelRef(model=args.embedder, batch_size=args.batch_size)}
    )
    embedder = build_embedder(
        models=models, llm=params.llm, budget=None, mode="all", tier=args.tier
    )
    embedder.check_endpoint()

    chunks_of = {
        s.chat.conversation_id: chunk_conversation(s.chat, params.ingest.chunk_tokens)
        for s in built.slices
    }
    questions: dict[str, list[Question]] = defaultdict(list)
    for question in built.questions:
        questions[question.conversation_id].append(question)
    texts = [t for chunks in chunks_of.values() for c in chunks for t in message_texts(c)]
    texts += [q.question for q in built.questions]
    started = time.perf_counter()
    vectors: dict[str, tuple[float, ...]] = {}
    for conversation, chunks in chunks_of.items():
        batch = [t for c in chunks for t in message_texts(c)]
        batch += [q.question for q in questions[conversation]]
        found = embedder.embed(batch, task="measure")
        if not found.ok:
            raise SystemExit(f"conversation {conversation}: {found.error}")
        vectors.update(zip(batch, found.vectors, strict=True))
    seconds = time.perf_counter() - started
    stats = embedder.accounting.stats("embedding")
    print(
        f"{args.tier}: {len(built.slices)} conversations, {len(built.questions)} questions, "
        f"{sum(len(c) for c in chunks_of.values())} chunks; embedder {args.embedder}: "
        f"{len(set(texts))} distinct texts, {sum(count_tokens(t) for t in set(texts)):,} tokens "
        f"(cl100k), {stats.calls} requests, {stats.cache_hits} texts from the cache, "
        f"{seconds:.1f} s"
    )

    cited = {r.question_id: r.source_chat_ids for r in built.rubrics}  # the harness's only
    recalls: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    uncited = 0
    for conversation, chunks in chunks_of.items():
        index = ChunkIndex(chunks)
        chunk_vectors = [[vectors[t] for t in message_texts(c)] for c in chunks]
        for question in questions[conversation]:
            if not cited[question.id]:
                uncited += 1
                continue
            for retriever in RETRIEVERS:
                order = rank_chunks(
                    retriever,
                    index.scores(question.question),
                    chunk_vectors,
                    vectors[question.question],
                )
                ranked = [chunks[i].message_ids for i in order]
                for k in args.k:
                    value = recall_at_k(ranked, cited[question.id], k)
                    assert value is not None
                    recalls[(retriever, k, question.ability)].append(value)
                    recalls[(retriever, k, "overall")].append(value)
    print(f"questions citing no message (left out): {uncited}")
    header = "| ability | n | " + " | ".join(f"{r}@{k}" for r in RETRIEVERS for k in args.k) + " |"
    print(header)
    print("|---|---:|" + "---:|" * (len(RETRIEVERS) * len(args.k)))
    for ability in (*ABILITIES, "overall"):
        n = len(recalls.get((RETRIEVERS[0], args.k[0], ability), []))
        if not n:
            continue
        cells = [sum(recalls[(r, k, ability)]) / n for r in RETRIEVERS for k in args.k]
        print(f"| {ability} | {n} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
