"""Resolution without the model: candidate pairs of entities (and of statements) that might be one.

Every new entity is compared with a bounded number of earlier entities of the same label that share
a name token (or a token prefix) with it, never with the whole graph, so the number of pairs (and of
model calls) grows linearly with the number of entities. Exact matches of the normalized name need
no model: they get the same id at extraction time. The model decides only the pairs this module
proposes, at most `max_llm_pairs` per label; the decisions become a merge map (union-find, the
earliest mention's id wins) that rewrites ids before anything is written, so merges keep every
relationship and every provenance link.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

from schemas.memory import normalize_name

PREFIX_CHARS = 4


@dataclass(frozen=True)
class Mention:
    """An entity (or statement) as resolution sees it: id, label, name and first position."""

    id: str
    label: str
    name: str
    position: int
    """Chunk position of its first mention: candidates come only from earlier or equal positions."""


@dataclass(frozen=True)
class CandidatePair:
    newer: str
    older: str
    label: str
    similarity: float


def _keys(normalized: str) -> set[str]:
    words = normalized.split()
    return set(words) | {w[:PREFIX_CHARS] for w in words if len(w) > PREFIX_CHARS}


def similarity(a: str, b: str) -> float:
    """The better of token Jaccard and character ratio between two normalized names."""
    ta, tb = set(a.split()), set(b.split())
    jaccard = len(ta & tb) / len(ta | tb) if ta and tb else 0.0
    return max(jaccard, SequenceMatcher(None, a, b).ratio())


def candidate_pairs(
    mentions: Sequence[Mention],
    *,
    per_mention: int,
    min_similarity: float,
    scan_limit: int = 50,
) -> list[CandidatePair]:
    """For each mention in order, its best `per_mention` earlier same-label look-alikes.

    At most `scan_limit` earlier mentions are scored per new one (most recent first per key), so
    the work per mention is bounded whatever the size of the graph.
    """
    index: dict[tuple[str, str], list[Mention]] = defaultdict(list)
    normalized: dict[str, str] = {}
    pairs: list[CandidatePair] = []
    for mention in sorted(mentions, key=lambda m: (m.position, m.id)):
        norm = normalize_name(mention.name)
        normalized[mention.id] = norm
        keys = _keys(norm)
        seen: dict[str, Mention] = {}
        for key in sorted(keys):
            for other in reversed(index[(mention.label, key)]):
                if len(seen) >= scan_limit:
                    break
                if other.id != mention.id:
                    seen.setdefault(other.id, other)
        scored = sorted(
            (
                (similarity(norm, normalized[other.id]), other.id)
                for other in seen.values()
                if normalized[other.id] != norm
            ),
            key=lambda item: (-item[0], item[1]),
        )
        pairs.extend(
            CandidatePair(mention.id, other_id, mention.label, round(score, 4))
            for score, other_id in scored[:per_mention]
            if score >= min_similarity
        )
        for key in keys:
            index[(mention.label, key)].append(mention)
    return pairs


def cap_per_label(
    pairs: Iterable[CandidatePair], max_per_label: int
) -> tuple[list[CandidatePair], list[CandidatePair]]:
    """(sent, skipped): the most similar `max_per_label` pairs of each label go to the model."""
    by_label: dict[str, list[CandidatePair]] = defaultdict(list)
    for pair in pairs:
        by_label[pair.label].append(pair)
    sent: list[CandidatePair] = []
    skipped: list[CandidatePair] = []
    for label in sorted(by_label):
        ranked = sorted(by_label[label], key=lambda p: (-p.similarity, p.newer, p.older))
        sent.extend(ranked[:max_per_label])
        skipped.extend(ranked[max_per_label:])
    return sent, skipped


def batched(items: Sequence[CandidatePair], size: int) -> list[list[CandidatePair]]:
    """Pairs in groups of `size` (several pairs per model call)."""
    if size < 1:
        raise ValueError(f"batch size must be positive, got {size}")
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def merge_map(positions: dict[str, int], same: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Union-find over the pairs judged the same: every id → its group's earliest id."""
    parent = {node: node for node in positions}

    def find(node: str) -> str:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in same:
        if a not in parent or b not in parent:
            continue
        ra, rb = find(a), find(b)
        if ra != rb:
            keep, drop = sorted((ra, rb), key=lambda n: (positions[n], n))
            parent[drop] = keep
    return {node: find(node) for node in parent if find(node) != node}


@dataclass(frozen=True)
class StatementRef:
    """A statement as the update/contradiction linker sees it."""

    id: str
    label: str
    entity_ids: frozenset[str]
    position: int


def statement_pairs(
    statements: Sequence[StatementRef], *, labels: frozenset[str], per_statement: int
) -> list[CandidatePair]:
    """(newer, older) pairs of statements that share an entity, for the model to call
    supersedes / contradicts / neither. Each statement meets at most `per_statement` earlier
    ones (the most recent first): linear in the number of statements."""
    by_entity: dict[str, list[StatementRef]] = defaultdict(list)
    pairs: list[CandidatePair] = []
    for statement in sorted(statements, key=lambda s: (s.position, s.id)):
        if statement.label not in labels:
            continue
        earlier: dict[str, tuple[int, int]] = {}
        for entity in sorted(statement.entity_ids):
            for other in by_entity[entity]:
                if other.position < statement.position and other.label == statement.label:
                    shared, pos = earlier.get(other.id, (0, other.position))
                    earlier[other.id] = (shared + 1, pos)
        ranked = sorted(earlier.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
        pairs.extend(
            CandidatePair(statement.id, other_id, statement.label, float(shared))
            for other_id, (shared, _) in ranked[:per_statement]
        )
        for entity in statement.entity_ids:
            by_entity[entity].append(statement)
    return pairs


@dataclass(frozen=True)
class Placed:
    """A node as the search by meaning sees it: id, label and first position."""

    id: str
    label: str
    position: int


def nearest_pairs(
    items: Sequence[Placed],
    vectors: Mapping[str, Sequence[float]],
    *,
    per_item: int,
    min_similarity: float,
    strictly_earlier: bool = False,
) -> list[CandidatePair]:
    """For each item in order (position, id), its `per_item` earlier items of the same label
    whose vectors are nearest (cosine at least `min_similarity`; ties by id): the look-alikes
    that share no word. `strictly_earlier`: only items of an earlier position (statements: a
    newer fact meets older ones). Exact over every earlier item of the label (one matrix
    product each): no model call, and the pairs stay bounded by `per_item`."""
    import numpy as np

    ordered = [i for i in sorted(items, key=lambda i: (i.position, i.id)) if i.id in vectors]
    by_label: dict[str, list[Placed]] = defaultdict(list)
    for item in ordered:
        by_label[item.label].append(item)
    pairs: list[CandidatePair] = []
    for label in sorted(by_label):
        group = by_label[label]
        matrix = np.asarray([vectors[i.id] for i in group], dtype=np.float64)
        norms = np.linalg.norm(matrix, axis=1)
        norms[norms == 0] = 1.0
        unit = matrix / norms[:, None]
        for j, item in enumerate(group[1:], start=1):
            scores = unit[:j] @ unit[j]
            ranked = sorted(
                (
                    (round(float(scores[k]), 4), group[k].id)
                    for k in range(j)
                    if not strictly_earlier or group[k].position < item.position
                ),
                key=lambda pair: (-pair[0], pair[1]),
            )
            pairs.extend(
                CandidatePair(item.id, other, label, score)
                for score, other in ranked[:per_item]
                if score >= min_similarity
            )
    return sorted(pairs, key=lambda p: (p.label, p.newer, p.older))


def union_pairs(*sources: Iterable[CandidatePair]) -> list[CandidatePair]:
    """The pairs of every source, each (newer, older) once, as the first source that names it
    has it: the name (or shared-entity) candidates first, then those only meaning found."""
    seen: dict[tuple[str, str], CandidatePair] = {}
    for source in sources:
        for pair in source:
            seen.setdefault((pair.newer, pair.older), pair)
    return list(seen.values())
