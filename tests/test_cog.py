"""README.md and docs/*.md show the figures of measurements/ as their cog blocks render them
(measure/render.py): `cog --check` fails on a figure edited by hand or a result changed without
`make docs`. In process, so the check costs what rendering costs (well under a second)."""

from __future__ import annotations

import json
from pathlib import Path

from cogapp import Cog

from measure.render import COG_OPTIONS, pages
from measure.result import RESULTS, Result

CHECK_FAILED = 5
"""cog's exit status when a file's output differs from what its blocks generate."""


def cog(*args: str) -> int:
    return int(Cog().main(["cog", *args]))


def test_the_pages_show_the_results_as_they_are() -> None:
    checked = [str(p) for p in pages()]
    assert any(p.endswith("README.md") for p in checked)
    assert any("/docs/" in p for p in checked)
    assert cog("--check", *COG_OPTIONS, *checked) == 0


def test_every_result_is_a_result_with_its_provenance() -> None:
    found = sorted(RESULTS.glob("*.json"))
    assert found
    for path in found:
        result = Result.model_validate_json(path.read_text(encoding="utf-8"))
        assert result.name == path.stem
        assert result.provenance == "measured" or result.provenance.startswith("migrated: ")
        assert result.figures, f"{path.name} holds no figure"


def test_a_figure_edited_by_hand_fails_the_check(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- [[[cog\n"
        "from measure.render import fig\n"
        "cog.outl(fig('judge_check', 'cases'))\n"
        "]]] -->\n"
        "<!-- [[[end]]] -->\n",
        encoding="utf-8",
    )
    assert cog("-r", str(page)) == 0
    rendered = page.read_text(encoding="utf-8")
    cases = json.loads((RESULTS / "judge_check.json").read_text())["figures"]["cases"]
    assert f"\n{cases:,}\n" in rendered
    assert cog("--check", str(page)) == 0
    page.write_text(rendered.replace(f"\n{cases:,}\n", f"\n{cases + 1:,}\n"), encoding="utf-8")
    assert cog("--check", str(page)) == CHECK_FAILED
