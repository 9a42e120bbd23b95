"""The 500K tier through the data stages on the real 500K chats (the shared copy's parquet, served
by a loopback Hub): fetch, verify-hash, repair and the slices of its modes, checked against
fixtures/slices-500K.json. The slices equal the chats except the pinned repairs, the data check
lists exactly the known finding, `official` cuts nothing at 500K (the benchmark holds no truncated
500K chat), and the 100K-only mode `full` is refused naming the tier's modes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench.slice import SliceFixture
from clients.files import read_jsonl
from schemas.errors import ParamsError
from schemas.params import Release
from schemas.records import ChatSlice, Question
from stages.common import read_params
from stages.fetch import fetch
from stages.repair import repair
from stages.slice import make_slices
from stages.verify_hash import verify
from tests.conftest import REPO_ROOT, SHARED_BEAM, skip_or_fail
from tests.support.e2e_repo import mirror_release
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror

pytestmark = pytest.mark.beam

PARQUET_500K = SHARED_BEAM / "mirror/datasets/Mohammadta/BEAM/data/500K-00000-of-00001.parquet"
PARAMS = REPO_ROOT / "params.yaml"
KNOWN_FINDINGS = [
    *[("plan_text", f"conversation 9 message {m}") for m in (564, 566, 568, 570, 852, 854, 858)],
    ("no_source_ids", "question conv1:knowledge_update:0"),
]
"""What the data check finds in the whole repaired 500K split: seven user messages of
conversation 9 that cite the generator's plan, and one question without sources (the 15 runaway
messages are repaired; no turn lacks a reply, no session is out of order at 500K)."""


@dataclass
class Tier:
    root: Path
    repaired: Path
    fixture: Path
    repairs: list[Any]


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Tier:
    if not PARQUET_500K.is_file():
        skip_or_fail(f"the 500K parquet is not in {PARQUET_500K.parent}")
    params = read_params(PARAMS).model_copy(update={"tier": "500K"})
    release = Release.model_validate(mirror_release(params.release["500K"].model_dump(), "500K"))
    root = tmp_path_factory.mktemp("tier500k")
    folder, receipt = root / "fetch", root / "receipt.json"
    with HubMirror(MIRROR_ROOT) as hub:
        fetch(release, params.fetch, folder, endpoint=hub.endpoint, cache_dir=root / "hf")
    verify(folder, "500K", release, receipt)
    repaired = root / "repaired.parquet"
    repair(receipt, "500K", params.repair, repaired, root / "record.json")
    return Tier(root, repaired, REPO_ROOT / params.fixture, params.tier_repairs)


def slice_mode(tier: Tier, mode: str, out: Path, **options: Any) -> list[tuple[str, str]]:
    _, findings = make_slices(
        tier.repaired,
        tier.fixture,
        mode,
        "cl100k_base",
        out,
        out.with_suffix(".json"),
        repairs=tier.repairs,
        **options,
    )
    return [(f.kind, f.where) for f in findings]


def chats(folder: Path) -> dict[str, ChatSlice]:
    return {
        p.stem.removeprefix("conv"): ChatSlice.model_validate_json(p.read_text())
        for p in (folder / "chats").iterdir()
    }


def test_the_whole_split_is_the_chats_but_the_pinned_repairs(tier: Tier, tmp_path: Path) -> None:
    found = slice_mode(tier, "all", tmp_path / "all")  # the fixture's hashes are checked in it

    assert found == KNOWN_FINDINGS
    held = chats(tmp_path / "all")
    assert sorted(held, key=int) == [str(c) for c in range(1, 36)]
    repaired = {(r.conversation_id, r.message_id) for r in tier.repairs}
    source = json.loads((tmp_path / "all" / "source.json").read_text())
    assert {(r["conversation_id"], r["message_id"]) for r in source["repaired"]} == repaired
    for row in pq.read_table(PARQUET_500K, columns=["conversation_id", "chat"]).to_pylist():
        conv = row["conversation_id"]
        original = {m["id"]: m["content"] for session in row["chat"] for m in session}
        sliced = {m.id: m.content for s in held[conv].sessions for m in s.messages}
        assert sorted(sliced) == sorted(original), conv
        changed = {i for i in original if sliced[i] != original[i]}
        assert changed == {m for c, m in repaired if c == conv}, conv
    questions = read_jsonl(tmp_path / "all" / "questions.jsonl", Question)
    assert len(questions) == 700


def test_lite_is_two_questions_of_conversation_13_and_official_cuts_nothing(
    tier: Tier, tmp_path: Path
) -> None:
    assert slice_mode(tier, "lite", tmp_path / "lite") == []
    lite = chats(tmp_path / "lite")["13"]
    assert [m.id for s in lite.sessions for m in s.messages] == [0, 218, 798]
    assert len(read_jsonl(tmp_path / "lite" / "questions.jsonl", Question)) == 2

    slice_mode(tier, "all", tmp_path / "official", cut="official")
    slice_mode(tier, "all", tmp_path / "full")
    for name in ("chats/conv1.json", "chats/conv28.json", "questions.jsonl"):
        assert (tmp_path / "official" / name).read_bytes() == (
            tmp_path / "full" / name
        ).read_bytes()
    fixture = SliceFixture.model_validate_json(tier.fixture.read_bytes())
    assert fixture.official_cut.last_message_ids == {}
    assert json.loads((tmp_path / "official" / "source.json").read_text())["left_out"] == {}


def test_a_mode_the_tier_lacks_is_refused_naming_its_modes(tier: Tier, tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="has no mode 'full': its modes are all, lite"):
        slice_mode(tier, "full", tmp_path / "full")
