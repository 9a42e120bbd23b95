"""Pin a tier's question set from the benchmark's own question files, before its chats are read.

For a tier whose chats cannot be read where it is pinned (1M and 10M: their chat files are too
large for the repository snapshot), it reads `chats/<tier>/<conversation>/probing_questions/
probing_questions.json` of a checkout of the benchmark's repository (mohammadtavakoli78/BEAM at
the scorer's pinned commit) and writes the tier's slice fixture: mode `all` with every question of
every conversation, mode `lite` with the first information_extraction and multi_session_reasoning
questions of the conversation a person chose (`--lite`), no slice pinned yet and no official cut
(`last_message_ids: null`; for 10M the source names the plan each truncated chat ends in, from
its `plan_cutoff.txt`). It keeps question ids only, never the text. Once the release has
been fetched and a person has looked at the slices, `python -m stages.slice --repin` (with that
`tier`) writes their message ids and hashes, and the slice stage checks them from then on.

    uv run python scripts/pin_tier_questions.py --tier 1M --chats <checkout>/chats/1M --lite 12
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.slice import ModePin, OfficialCut, SliceFixture  # noqa: E402
from clients.files import write_json  # noqa: E402
from schemas.records import ABILITIES  # noqa: E402
from stages.common import read_params  # noqa: E402

LITE_ABILITIES = ("information_extraction", "multi_session_reasoning")
"""As 100K's and 500K's lite: one question that recalls a fact, one that joins sessions."""


def question_ids(chats: Path) -> dict[str, list[str]]:
    """Per conversation (in number order), its question ids as the slice names them."""
    found: dict[str, list[str]] = {}
    folders = sorted((p for p in chats.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for folder in folders:
        path = folder / "probing_questions" / "probing_questions.json"
        if not path.is_file():  # the layout of 100K and 500K
            path = folder / "probing_questions.json"
        questions = json.loads(path.read_text(encoding="utf-8"))
        unknown = sorted(set(questions) - set(ABILITIES))
        if unknown:
            sys.exit(f"{path}: abilities {unknown} are not BEAM's ten; look at the file")
        found[folder.name] = [
            f"conv{folder.name}:{ability}:{i}"
            for ability in sorted(questions)
            for i in range(len(questions[ability]))
        ]
    if not found:
        sys.exit(f"no conversation folders in {chats}")
    return found


def plan_cutoffs(chats: Path) -> dict[str, int]:
    """10M: per conversation, the plan (1-based) its truncated chat ends in
    (`plan_cutoff.txt`); empty where the files are absent (1M)."""
    return {
        p.parent.name: int(p.read_text(encoding="utf-8").strip())
        for p in sorted(chats.glob("*/plan_cutoff.txt"), key=lambda p: int(p.parent.name))
    }


def fixture(
    tier: str, ids: dict[str, list[str]], lite: str, commit: str, cutoffs: dict[str, int]
) -> SliceFixture:
    if lite not in ids:
        sys.exit(f"--lite {lite}: the tier has conversations {', '.join(ids)}")
    about = (
        f"Facts, not code: the {tier} tier's question sets (params `tier: {tier}`). all: every "
        f"question of its {len(ids)} conversations; lite: the first information_extraction and "
        f"multi_session_reasoning questions of conversation {lite}, a smoke test. The question "
        "ids were read from the benchmark's question files (chats/"
        f"{tier}/<conversation>/probing_questions/probing_questions.json of "
        f"mohammadtavakoli78/BEAM at commit {commit}) by scripts/pin_tier_questions.py, because "
        "its chats could not be read there: no slice is pinned yet. After the release has been "
        "fetched and a person has looked at the slices, `uv run --frozen python -m stages.slice "
        f"--repin` (with `tier: {tier}`) writes their message ids and hashes. No rubric has been "
        "checked against its chat, so known_bad_rubric is empty."
    )
    cut = OfficialCut(
        source=(
            f"the benchmark reads a truncated chat (chat_trunecated.json) for some {tier} "
            f"conversations (mohammadtavakoli78/BEAM at commit {commit}), but those files were "
            "not readable where this set was pinned, so its cut points are not pinned"
            + (
                "; each ends inside the plan its plan_cutoff.txt names, later plans are not read "
                f"(conversation: plan {', '.join(f'{c}: {n}' for c, n in cutoffs.items())})"
                if cutoffs
                else ""
            )
        ),
        last_message_ids=None,
    )
    lite_ids = [f"conv{lite}:{ability}:0" for ability in LITE_ABILITIES]
    modes = {
        "lite": ModePin(
            selection="answer_messages", conversations=[lite], question_ids=lite_ids, slices={}
        ),
        "all": ModePin(
            selection="whole_conversations",
            conversations=list(ids),
            question_ids=[q for qs in ids.values() for q in qs],
            slices={},
        ),
    }
    return SliceFixture(about=about, known_bad_rubric={}, official_cut=cut, modes=modes)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tier", required=True, choices=["1M", "10M"])
    parser.add_argument("--chats", type=Path, required=True, help="chats/<tier> of a checkout")
    parser.add_argument("--lite", required=True, help="the conversation of mode lite")
    args = parser.parse_args()
    params = read_params(ROOT / "params.yaml")
    ids = question_ids(args.chats)
    made = fixture(args.tier, ids, args.lite, params.judge.scorer_commit, plan_cutoffs(args.chats))
    pinned = params.slice.fixtures.get(args.tier)
    if pinned is None:
        sys.exit(f"pins.yaml names no fixture for tier {args.tier}: add slice.fixtures.{args.tier}")
    path = ROOT / pinned
    write_json(path, made.model_dump(mode="json"))
    total = sum(len(q) for q in ids.values())
    print(f"pinned {total} questions of {len(ids)} conversations (lite: {args.lite}) in {path}")


if __name__ == "__main__":
    main()
