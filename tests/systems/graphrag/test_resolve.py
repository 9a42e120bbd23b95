"""Resolution candidates: bounded, linear in the number of entities, and merges that keep ids."""

from __future__ import annotations

import random

from systems.graphrag.resolve import (
    CandidatePair,
    Mention,
    batched,
    candidate_pairs,
    cap_per_label,
    merge_map,
    normalize_name,
)


def test_normalize_name_drops_case_accents_articles_and_possessives() -> None:
    assert normalize_name("The  Café's Menu!") == "cafe menu"
    assert normalize_name("  Dr. Émile Zola ") == "dr emile zola"
    assert normalize_name("The") == "the"


def test_look_alikes_of_the_same_label_pair_up_and_other_labels_do_not() -> None:
    mentions = [
        Mention("p1", "Person", "Sarah Connor", 0),
        Mention("p2", "Person", "Sarah", 1),
        Mention("t1", "Tool", "Sarah", 1),
        Mention("p3", "Person", "Bob", 2),
    ]
    pairs = candidate_pairs(mentions, per_mention=3, min_similarity=0.3)
    assert [(p.newer, p.older, p.label) for p in pairs] == [("p2", "p1", "Person")]


def test_prefix_keys_catch_inflections() -> None:
    mentions = [Mention("a", "Topic", "budgeting", 0), Mention("b", "Topic", "budget plan", 1)]
    pairs = candidate_pairs(mentions, per_mention=2, min_similarity=0.3)
    assert [(p.newer, p.older) for p in pairs] == [("b", "a")]


def _synthetic(n: int, seed: int = 7) -> list[Mention]:
    rng = random.Random(seed)
    stems = ["alpha", "bravo", "delta", "gamma", "omega", "sigma", "kappa", "theta"]
    return [
        Mention(f"e{i}", "Topic", f"{rng.choice(stems)} {rng.choice(stems)} item{i}", i // 10)
        for i in range(n)
    ]


def test_pairs_grow_linearly_not_quadratically() -> None:
    per_mention = 3
    counts = {
        n: len(candidate_pairs(_synthetic(n), per_mention=per_mention, min_similarity=0.0))
        for n in (100, 200, 400, 800)
    }
    for n, count in counts.items():
        assert count <= per_mention * n
    # Doubling the entities at most doubles the pairs (plus slack), where all-pairs would quadruple.
    assert counts[800] <= 2.2 * counts[400] and counts[400] <= 2.2 * counts[200]


def test_cap_per_label_keeps_the_most_similar_and_reports_the_rest() -> None:
    pairs = [CandidatePair(f"n{i}", "o", "Person", i / 10) for i in range(5)] + [
        CandidatePair("x", "y", "Tool", 0.5)
    ]
    sent, skipped = cap_per_label(pairs, 2)
    assert [p.newer for p in sent] == ["n4", "n3", "x"]
    assert sorted(p.newer for p in skipped) == ["n0", "n1", "n2"]
    assert [len(b) for b in batched(sent, 2)] == [2, 1]


def test_merge_map_points_every_member_at_the_earliest_mention() -> None:
    positions = {"a": 3, "b": 1, "c": 5, "d": 0}
    mapping = merge_map(positions, [("a", "b"), ("c", "a"), ("x", "d")])
    assert mapping == {"a": "b", "c": "b"}


def test_statement_pairs_link_newer_to_older_facts_that_share_an_entity() -> None:
    from systems.graphrag.resolve import StatementRef, statement_pairs

    facts = [
        StatementRef("f1", "Fact", frozenset({"rent"}), 0),
        StatementRef("f2", "Fact", frozenset({"car"}), 1),
        StatementRef("f3", "Fact", frozenset({"rent", "car"}), 2),
        StatementRef("p1", "Preference", frozenset({"rent"}), 3),
        StatementRef("f4", "Fact", frozenset({"rent"}), 2),
    ]
    pairs = statement_pairs(facts, labels=frozenset({"Fact"}), per_statement=1)
    assert [(p.newer, p.older) for p in pairs] == [("f3", "f2"), ("f4", "f1")]
    # same position is not "earlier": f3 and f4 (both chunk 2) are never paired
    many = statement_pairs(facts, labels=frozenset({"Fact"}), per_statement=5)
    assert ("f4", "f3") not in {(p.newer, p.older) for p in many}
