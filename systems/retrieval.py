"""Ranking by meaning and by keywords together: the pure parts every retrieving system shares.

- `dense_ranking`: documents by the cosine of their vectors to the query's (the embedder's
  vectors, normalised here), best first; `best_passage_cosines`: a document of several passages
  scores as its best one (MaxP).
- `reciprocal_rank_fusion`: several rankings into one, each document scoring Σ 1 / (k + rank)
  over the rankings it appears in (Cormack, Clarke and Büttcher, SIGIR 2009; k = 60 as there).
  Chosen over a weighted sum of scores because BM25 scores and cosines live on different scales
  that change from query to query: fusing ranks needs no normalisation and no weight fitted to a
  run (there is nothing here to fit it on honestly), and it is what Elasticsearch, OpenSearch and
  Neo4j's own hybrid retrievers offer by default.
- Ties everywhere are broken by document order (for chunks: chat order, the earlier first), so
  the same texts and query always give the same ranking.
- `recall_at_k`: the share of a question's cited messages among those of the first k documents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

RRF_K = 60
"""The constant of reciprocal rank fusion (Cormack et al. 2009)."""


def normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else [0.0 for _ in vector]


def cosines(documents: Sequence[Sequence[float]], query: Sequence[float]) -> list[float]:
    """The cosine of each document's vector to the query's (0 for an all-zero vector)."""
    import numpy as np

    if not documents:
        return []
    matrix = np.asarray(documents, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    q = np.asarray(normalise(query), dtype=np.float64)
    if matrix.shape[1] != q.shape[0]:
        raise ValueError(
            f"the query's vector has {q.shape[0]} dimensions and the documents' {matrix.shape[1]}"
            ": they were embedded by different models"
        )
    return [float(x) for x in (matrix / norms[:, None]) @ q]


def ranking(scores: Sequence[float], *, keep_zero: bool = True) -> list[int]:
    """Document indexes by score, best first, equal scores in document order; with
    `keep_zero=False` documents scoring 0 or less are left out (a keyword ranking where no word
    of the query matched)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return order if keep_zero else [i for i in order if scores[i] > 0]


def dense_ranking(documents: Sequence[Sequence[float]], query: Sequence[float]) -> list[int]:
    return ranking(cosines(documents, query))


def best_passage_cosines(
    documents: Sequence[Sequence[Sequence[float]]], query: Sequence[float]
) -> list[float]:
    """Each document's score as its best passage's cosine to the query (MaxP: Dai and Callan,
    SIGIR 2019); a document without passages scores 0."""
    flat = [vector for passages in documents for vector in passages]
    scores = cosines(flat, query) if flat else []
    out: list[float] = []
    start = 0
    for passages in documents:
        out.append(max(scores[start : start + len(passages)], default=0.0))
        start += len(passages)
    return out


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    """The fused ranking of every document in any of `rankings`, best first; equal fused scores
    in document order."""
    fused: dict[int, float] = {}
    for order in rankings:
        for rank, doc in enumerate(order, start=1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(fused, key=lambda doc: (-fused[doc], doc))


def recall_at_k(
    ranked_message_ids: Sequence[Sequence[int]], cited: Sequence[int], k: int
) -> float | None:
    """The share of `cited` message ids among the messages of the first k ranked documents
    (None when nothing is cited: no recall to measure)."""
    wanted = set(cited)
    if not wanted:
        return None
    reached = {m for doc in ranked_message_ids[:k] for m in doc}
    return len(wanted & reached) / len(wanted)
