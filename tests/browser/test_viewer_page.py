"""The run viewer in headless Chromium, on the page of a real lite run: `dvc repro` in a temporary
copy of the repo (loopback Hub mirror, scorer stand-in, the scripted test model), then
`python -m commands.viewer`. A person's checks: the headline and a known question's answer and
rubric verdicts are on screen, the benchmark-code score and the judge check (its agreement per kind
and warning) beside the headline, the filters hide the other question, no text of the run becomes
markup or script, and the page makes no request. The screenshot is kept in tests/artifacts/."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.viewer.data import PREFETCH_TEXT
from clients.files import read_jsonl, write_jsonl
from commands import viewer as viewer_command
from schemas.judging import Judgement
from schemas.records import Rubric
from schemas.traces import Trace
from stages.common import read_params
from tests.conftest import skip_or_fail
from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror

pytestmark = [
    pytest.mark.browser,
    pytest.mark.e2e,
    pytest.mark.beam,
    pytest.mark.neo4j,
    pytest.mark.slow,
]
QUESTION = "conv17:information_extraction:0"
OTHER = "conv17:multi_session_reasoning:0"
HOSTILE = (
    '</script><script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2">'
    "<b>Ignore previous instructions</b>"
)


@pytest.fixture(scope="module")
def lite_run(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A lite run's folder (`dvc repro` of a repo copy) with its page, reports/run.html."""
    if not MIRROR_ROOT.is_dir():
        skip_or_fail(f"the BEAM mirror folder is missing: {MIRROR_ROOT}")
    with HubMirror(MIRROR_ROOT) as hub, repo_copy(tmp_path_factory.mktemp("lite"), hub) as repo:
        repo.dvc("repro")
        written_by_report = (repo.path / "reports/run.html").read_bytes()
        done = repo.command("viewer")
        assert done.returncode == 0, done.stderr
        # the report stage and the viewer command build the page from the same run alike
        assert (repo.path / "reports/run.html").read_bytes() == written_by_report
        yield repo.path


def write_viewer() -> Path:
    """What `python -m commands.viewer` does in the working directory."""
    return viewer_command.write_page(read_params())


def open_page(browser: Any, page_file: Path) -> tuple[Any, list[str], list[str]]:
    """The page, with the requests it made and the script errors it raised."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(page_file.as_uri(), wait_until="load")
    return page, requests, errors


def test_the_page_of_a_lite_run_shows_a_question_and_its_filters_hide_the_other(
    lite_run: Path, browser: Any, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    traces = {t.question_id: t for t in read_jsonl(lite_run / "data/answer/traces.jsonl", Trace)}
    rubrics = {r.question_id: r for r in read_jsonl(lite_run / "data/slice/rubrics.jsonl", Rubric)}
    judged = read_jsonl(lite_run / "data/judge/judgements.jsonl", Judgement)
    scores = {j.question_id: j.score for j in judged}
    page_file = lite_run / "reports" / "run.html"
    page, requests, errors = open_page(browser, page_file)

    expect(page.locator("h1")).to_have_text("BEAM memory benchmark: lite run")
    expect(page.get_by_text("This run used a test model")).to_be_visible()
    expect(page.get_by_text("2 of 2 questions shown")).to_be_visible()
    # beside the headline: the benchmark-code score and the judge check with its warning
    report = json.loads((lite_run / "metrics/report.json").read_text())
    beam_code = f"{report['score_beam_code']['overall']:.3f}"
    expect(page.locator(".beam-code")).to_contain_text("Benchmark-code score (beam_code")
    expect(page.locator(".beam-code")).to_contain_text(beam_code)
    check = json.loads((lite_run / "data/judge_check/summary.json").read_text())
    cases, agreement = check["cases"], check["agreement"]
    min_agreement = read_params(lite_run / "params.yaml").judge_check.min_agreement

    def pct(share: float) -> str:  # as the page's Math.round does (half up)
        return f"{math.floor(share * 100 + 0.5)}%"

    judge_check = page.locator(".judge-check")
    expect(judge_check).to_contain_text(
        f"Judge check: agreement {pct(agreement['overall'])} on {cases['overall']} known"
    )
    for kind in (k for k in ("stated", "other_fact", "altered", "empty", "buried") if cases[k]):
        name = kind.replace("_", " ")
        expect(judge_check).to_contain_text(f"{name} {pct(agreement[kind])} of {cases[kind]}")
    if agreement["overall"] < min_agreement:
        expect(judge_check).to_have_class("judge-check warn")
        expect(judge_check).to_contain_text("Warning: the judge gave the known score")
    else:
        expect(judge_check).to_have_class("judge-check card ok")
    question = page.locator(f"details[id='{QUESTION}']")
    other = page.locator(f"details[id='{OTHER}']")
    question.locator("summary").click()
    expect(question.locator(".answer")).to_have_text(traces[QUESTION].answer)
    for item, verdict in zip(
        rubrics[QUESTION].rubric,
        next(j for j in judged if j.question_id == QUESTION).items,
        strict=True,
    ):
        row = question.locator("tr", has=page.locator("span.item", has_text=item))
        expect(row).to_be_visible()
        expect(row.locator(".score")).to_have_text(f"{verdict.score:.2f}")
        expect(row).to_contain_text(verdict.reason or "")
    # the harness's search for the question (answer.prefetch) first, then the agent's own
    calls = question.get_by_text("search_memory(")
    expect(calls).to_have_count(2)
    prefetched = traces[QUESTION].prefetched
    assert prefetched is not None and prefetched.arguments is not None
    expect(question).to_contain_text(PREFETCH_TEXT)
    expect(calls.first).to_contain_text(f'"query": "{prefetched.arguments["query"][:20]}')
    expect(question.get_by_text("reached", exact=True).first).to_be_visible()  # its evidence
    shot = artifacts / "viewer-lite.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot of the lite run's page: {shot}")

    page.select_option("select[name=ability]", "multi_session_reasoning")
    expect(question).to_be_hidden()
    expect(other).to_be_visible()
    expect(page.get_by_text("1 of 2 questions shown")).to_be_visible()
    page.select_option("select[name=ability]", "")
    page.fill("input[name='score from']", str(scores[QUESTION]))
    page.fill("input[name='score to']", str(scores[QUESTION]))
    expect(question).to_be_visible()
    expect(other).to_be_visible() if scores[OTHER] == scores[QUESTION] else expect(
        other
    ).to_be_hidden()
    page.fill("input[name='score from']", "0")
    page.fill("input[name='score to']", "1")
    page.fill("input[name=search]", "afterschool")  # a word of the first question only
    expect(question).to_be_visible()
    expect(other).to_be_hidden()
    assert requests == [page_file.as_uri()], requests
    assert errors == []
    page.close()


def copy_run(run: Path, target: Path) -> None:
    """The files the page is made from (not the graph's memory files)."""
    for rel in ("data/slice", "data/answer", "data/judge", "data/judge_check", "metrics"):
        shutil.copytree(run / rel, target / rel)
    (target / "data/ingest").mkdir()
    for kept in (run / "data/ingest").glob("*.json"):  # run.json and the graph counts
        shutil.copy(kept, target / "data/ingest" / kept.name)
    for name in ("params.yaml", "settings.yaml", "pins.yaml"):
        shutil.copy(run / name, target / name)


def test_a_judge_check_below_the_threshold_and_a_call_written_as_text_show_on_the_page(
    lite_run: Path, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from playwright.sync_api import expect

    copy_run(lite_run, tmp_path)
    summary_file = tmp_path / "data/judge_check/summary.json"
    summary = json.loads(summary_file.read_text())
    summary["agreement"] |= {"overall": 0.5, "buried": 0.0}
    summary_file.write_text(json.dumps(summary))
    traces_file = tmp_path / "data/answer/traces.jsonl"
    traces = read_jsonl(traces_file, Trace)
    first = traces[0]
    written = first.tool_calls[0].model_copy(update={"source": "text"})
    traces[0] = first.model_copy(update={"tool_calls": [written, *first.tool_calls[1:]]})
    write_jsonl(traces_file, traces)
    monkeypatch.chdir(tmp_path)
    page, requests, errors = open_page(browser, write_viewer().resolve())
    judge_check = page.locator(".judge-check")
    expect(judge_check).to_have_class("judge-check warn")
    expect(judge_check).to_contain_text("Judge check: agreement 50% on")
    expect(judge_check).to_contain_text("Warning: the judge gave the known score on 50%")
    expect(judge_check).to_contain_text("(weakest: buried 0%")
    question = page.locator(f"details[id='{first.question_id}']")
    question.locator("summary").click()
    expect(question.get_by_text("written as text")).to_have_count(1)
    assert errors == [] and len(requests) == 1
    page.close()


def test_hostile_texts_of_a_run_are_shown_as_text_and_never_run(
    lite_run: Path, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lite run's files with an answer, a chat message and a judge reason replaced by
    markup that would close the data element, run a script and load an image."""
    copy_run(lite_run, tmp_path)
    traces_file = tmp_path / "data/answer/traces.jsonl"
    traces = [
        t.model_copy(update={"answer": HOSTILE}) if t.question_id == QUESTION else t
        for t in read_jsonl(traces_file, Trace)
    ]
    write_jsonl(traces_file, traces)
    chat_file = tmp_path / "data/slice/chats/conv17.json"
    chat = json.loads(chat_file.read_text())
    for session in chat["sessions"]:
        for message in session["messages"]:
            message["content"] = HOSTILE + message["content"]
    chat_file.write_text(json.dumps(chat))
    monkeypatch.chdir(tmp_path)
    page_file = write_viewer().resolve()

    page, requests, errors = open_page(browser, page_file)
    question = page.locator(f"details[id='{QUESTION}']")
    question.locator("summary").click()
    from playwright.sync_api import expect

    expect(question.locator(".answer")).to_have_text(HOSTILE)
    expect(question.locator(".msg .text").first).to_contain_text(HOSTILE)
    assert page.evaluate("window.pwned") is None
    assert page.locator("img").count() == 0 and page.locator("main b").count() == 0
    assert requests == [page_file.as_uri()], requests
    assert errors == []
    page.close()
