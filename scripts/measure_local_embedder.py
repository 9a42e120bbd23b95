"""Measure the local embedder on this machine: texts and word pieces per second through its
server, batched and one at a time.

Starts the server of `--model` (`local_embedder_server`, `--threads` intra-op threads, forward
passes of at most `--batch-size` texts and `--batch-tokens` word pieces), takes `--texts` chat
messages (the BEAM 100K chats in ../shared/beam, read from the mirror parquet with pandas, in
order; synthetic chat-like text where that file is absent; no text is written anywhere;
`--max-chars` cuts each, for short texts), embeds them once to warm up, then `--repeats` times in
requests of `--batch-size` texts, and again one text per request. Prints for each: texts/s and word
pieces/s (the server's `usage`, [CLS] and [SEP] included, cut at the model's max_tokens), the
median of the repeats, and the ratio of the two rates. Every number is wall time on whatever cores
it gets.

Usage: `uv run python scripts/measure_local_embedder.py [--texts 256] [--batch-size 32]
[--batch-tokens N] [--max-chars N] [--threads N] [--repeats 3] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clients.local_servers.local_embedder import (  # noqa: E402
    live_servers,
    local_embedder,
    local_embedder_server,
)
from clients.local_servers.local_model import LocalEndpoint, post_json  # noqa: E402

BEAM_PARQUET = (
    ROOT.parent
    / "shared"
    / "beam"
    / "mirror"
    / "datasets"
    / "Mohammadta"
    / "BEAM"
    / "data"
    / "100K-00000-of-00001.parquet"
)
WORDS = (
    "plan", "schedule", "budget", "meeting", "project", "deadline", "review", "draft", "email",
    "client", "trip", "hotel", "flight", "recipe", "dinner", "workout", "running", "knee",
    "doctor", "appointment", "invoice", "tax", "report", "code", "bug", "test", "deploy",
    "server", "database", "query", "python", "function", "error", "garden", "tomatoes", "weekend",
    "family", "birthday", "gift", "book", "chapter", "notes", "summary", "presentation", "slides",
    "team", "manager", "feedback",
)  # fmt: skip


def beam_texts(limit: int) -> list[str]:
    import pandas as pd

    texts: list[str] = []
    frame = pd.read_parquet(BEAM_PARQUET, columns=["chat"])
    for chat in frame["chat"]:
        for session in chat:
            for message in session:
                if message["content"]:
                    texts.append(str(message["content"]))
                if len(texts) == limit:
                    return texts
    return texts


def synthetic_texts(limit: int, seed: int = 0) -> list[str]:
    """Chat-like lengths: most messages 10-60 words, some 150-300 (past the cut)."""
    rng = random.Random(seed)
    texts = []
    for _ in range(limit):
        length = rng.randint(150, 300) if rng.random() < 0.3 else rng.randint(10, 60)
        texts.append(" ".join(rng.choice(WORDS) for _ in range(length)) + ".")
    return texts


def run(endpoint: LocalEndpoint, texts: list[str], batch_size: int) -> tuple[float, int]:
    """Seconds and word pieces to embed `texts` in requests of batch_size."""
    tokens = 0
    started = time.perf_counter()
    for i in range(0, len(texts), batch_size):
        answer = post_json(
            f"{endpoint.base_url}/embeddings",
            {"model": "local", "input": texts[i : i + batch_size]},
            endpoint.api_key,
            timeout=600,
        )
        tokens += int(answer["usage"]["prompt_tokens"])
    return time.perf_counter() - started, tokens


def measure(
    endpoint: LocalEndpoint, texts: list[str], batch_size: int, repeats: int
) -> dict[str, Any]:
    runs = [run(endpoint, texts, batch_size) for _ in range(repeats)]
    seconds = statistics.median(s for s, _ in runs)
    tokens = runs[0][1]
    return {
        "batch_size": batch_size,
        "texts": len(texts),
        "word_pieces": tokens,
        "seconds": round(seconds, 3),
        "texts_per_second": round(len(texts) / seconds, 1),
        "word_pieces_per_second": round(tokens / seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="local/all-minilm-l6-v2")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32, help="texts per request")
    parser.add_argument(
        "--batch-tokens", type=int, default=None, help="word pieces per pass (the model's own)"
    )
    parser.add_argument("--max-chars", type=int, default=None, help="cut each text to this")
    parser.add_argument("--threads", type=int, default=None, help="default: the model's own")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    source = "BEAM 100K chats" if BEAM_PARQUET.is_file() else "synthetic chat-like text"
    texts = beam_texts(args.texts) if BEAM_PARQUET.is_file() else synthetic_texts(args.texts)
    if args.max_chars:
        texts = [text[: args.max_chars] for text in texts]
        source += f", cut to {args.max_chars} characters"
    spec = local_embedder(args.model)
    threads = args.threads or spec.threads
    print(f"{args.model}: {len(texts)} texts from {source}; {threads} threads; ", end="")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    server_batches = {"batch_size": args.batch_size, "batch_tokens": args.batch_tokens}
    with local_embedder_server(args.model, threads=threads, **server_batches) as endpoint:
        [server] = [s for s in live_servers() if s.base_url == endpoint.base_url]
        run(endpoint, texts, args.batch_size)  # warm-up
        batched = measure(endpoint, texts, args.batch_size, args.repeats)
        single = measure(endpoint, texts, 1, args.repeats)
    result = {
        "model": args.model,
        "source": source,
        "threads": threads,
        "batch_tokens": args.batch_tokens or spec.batch_tokens,
        "load_seconds": server.load_seconds,
        "batched": batched,
        "one_at_a_time": single,
        "speedup_texts_per_second": round(
            batched["texts_per_second"] / single["texts_per_second"], 2
        ),
        "mean_word_pieces": round(batched["word_pieces"] / batched["texts"], 1),
    }
    print(f"server healthy after {server.load_seconds} s")
    for name in ("batched", "one_at_a_time"):
        row = result[name]
        print(
            f"{name:14} {row['texts']:5} texts in requests of {row['batch_size']:3}: "
            f"{row['seconds']:7.2f} s, {row['texts_per_second']:7.1f} texts/s, "
            f"{row['word_pieces_per_second']:8.1f} word pieces/s"
        )
    print(
        f"mean {result['mean_word_pieces']} word pieces a text; batched / one at a time: "
        f"{result['speedup_texts_per_second']}x texts/s"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
