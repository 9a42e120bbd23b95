"""viewer: a self-contained HTML page of a run, `reports/run.html`, to read it question by question.

Reads the run's files in the working directory (the slice's questions, rubrics and chats, the
agent's traces, the judgements, `metrics/report.json`, the judge check's summary, the graph
counts and the stages' run.json) and writes a page that works from file://: its CSS and
JavaScript are inline, its data is embedded as JSON, and a Content-Security-Policy forbids it
any network request. It shows the headline (scores with intervals, the benchmark-code score,
the judge check's agreement per kind and its warning, cost, failures, the test-model warning),
the graph built per conversation, and every question with its answer, rubric verdicts (the
judge's raw reply on demand), event alignment, the agent's steps (a call the model wrote as
text marked so) and the evidence it reached, with the chat's licence.

The chat and the model's texts are untrusted (they may hold HTML or prompt injections): the page
puts every text in the DOM with `textContent`, never as markup, and the embedded JSON has every
`<` escaped so that no text can close its <script> element. The same files give the same bytes.
`python -m stages.viewer [--out PATH]` writes it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.judge_check.run import judge_warning
from bench.slice import load_chats
from clients.files import read_json, read_record, read_records, read_rows, write_atomic
from clients.params_file import PARAMS_FILE, load_params
from schemas.errors import DataError
from schemas.judge_check import KINDS, JudgeCheckSummary
from schemas.judging import FLAGS, Judgement
from schemas.params import JudgeCheckParams, ReportParams
from schemas.records import ABILITIES, ChatSlice, Question, Rubric
from schemas.traces import Trace

OUT = Path("reports/run.html")
EVIDENCE_CHARS = 6000
"""A message the question needed is shown up to this many characters."""
REACHED_CHARS = 300
"""A message the agent reached but the question did not need: its first characters only."""
GRAPH_KEYS = (
    "chunks",
    "entities",
    "statements",
    "relationships",
    "supersedes",
    "contradicts",
    "empty_extractions",
    "failed_extractions",
)
GRAPHS = Path("data/ingest/graphs.json")
JUDGE_CHECK = Path("data/judge_check/summary.json")
COST_PHASES = ("ingest_extraction", "ingest_resolution", "agent", "judge", "total")
ROW_FLAGS = (*FLAGS, "error")
LICENCE = (
    "This page quotes and adapts the chat of BEAM (Tavakoli et al., Hugging Face dataset "
    "Mohammadta/BEAM), licensed CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/). "
    "It is adapted material under the same licence: share it only under CC BY-SA 4.0, with this "
    "attribution."
)


# -- reading the run ------------------------------------------------------------------------------
def _graph_counts() -> Any:
    """The counts of each conversation's graph (the ingest stage's data/ingest/graphs.json)."""
    if not GRAPHS.is_file():
        raise DataError(f"no graph counts in {GRAPHS}: run `dvc repro ingest` first")
    return read_json(GRAPHS)


def _confidence() -> float | None:
    """The report's confidence level (for the interval's label), where params.yaml says it."""
    if not Path(PARAMS_FILE).is_file():
        return None
    return load_params("report", ReportParams).confidence


def _min_agreement() -> float | None:
    """The judge check's threshold (`judge_check.min_agreement`), where params.yaml says it."""
    if not Path(PARAMS_FILE).is_file():
        return None
    return load_params("judge_check", JudgeCheckParams).min_agreement


# -- the page's data (pure) -----------------------------------------------------------------------
def _num(value: Any, digits: int = 4) -> Any:
    return round(value, digits) if isinstance(value, float) else value


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _steps(trace: Trace) -> list[dict[str, Any]]:
    """The agent's turns that called tools, each with its text and its calls."""
    turns: list[dict[str, Any]] = [{"text": text, "calls": []} for text in trace.turn_texts]
    for record in trace.tool_calls:
        arguments = (
            json.dumps(record.arguments, ensure_ascii=False, sort_keys=True)
            if record.arguments is not None
            else record.raw_arguments
        )
        turns[record.turn]["calls"].append(
            {
                "name": record.name,
                "arguments": arguments,
                "result": record.result,
                "error": record.error,
                "ids": len(record.ids),
                "message_ids": record.message_ids,
                "source": record.source,
            }
        )
    return turns


def _question(
    question: Question,
    rubric: Rubric,
    trace: Trace,
    judgement: Judgement,
    row: Mapping[str, Any],
) -> dict[str, Any]:
    event = judgement.event
    return {
        "id": question.id,
        "conversation": question.conversation_id,
        "ability": question.ability,
        "question": question.question,
        "answer": trace.answer,
        "error": trace.error,
        "score": _num(judgement.score),
        "flags": list(row["flags"]),
        "known_bad_reason": rubric.known_bad_reason,
        "evidence_recall": _num(row.get("evidence_recall")),
        "items": [
            {
                "item": item.rubric_item,
                "score": item.score,
                "reason": item.reason,
                "reply": item.reply,
                "error": item.error,
            }
            for item in judgement.items
        ],
        "event": None
        if event is None
        else {
            "lines": event.answer_lines,
            "matches": event.matches,
            "calls": event.calls,
            "failed_calls": event.failed_calls,
            "capped": event.capped,
            "precision": _num(event.precision),
            "recall": _num(event.recall),
            "f1": _num(event.f1),
            "tau_b": _num(event.tau_b),
            "tau_norm": _num(event.tau_norm),
        },
        "judge_calls": judgement.calls,
        "agent": {
            "calls": trace.calls,
            "steps": trace.steps,
            "prompt_tokens": trace.prompt_tokens,
            "completion_tokens": trace.completion_tokens,
            "max_context_tokens": trace.max_context_tokens,
        },
        "turns": _steps(trace),
        "needed": rubric.source_chat_ids,
        "reached": trace.reached_message_ids,
    }


def _messages(
    chats: Sequence[ChatSlice], questions: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The chat messages the page quotes, keyed `<conversation>:<message id>`, each once: whole
    (up to EVIDENCE_CHARS) where a question needed it, else its first REACHED_CHARS."""
    needed = {f"{q['conversation']}:{m}" for q in questions for m in q["needed"]}
    wanted = needed | {f"{q['conversation']}:{m}" for q in questions for m in q["reached"]}
    out: dict[str, dict[str, Any]] = {}
    for chat in chats:
        for session in chat.sessions:
            for message in session.messages:
                key = f"{chat.conversation_id}:{message.id}"
                if key in wanted:
                    limit = EVIDENCE_CHARS if key in needed else REACHED_CHARS
                    out[key] = {
                        "role": message.role,
                        "session": session.number,
                        "date": session.date_iso,
                        "text": _cut(message.content, limit),
                    }
    return out


def _headline(report: Mapping[str, Any], events: Mapping[str, Any]) -> dict[str, Any]:
    """From metrics/report.json; a group it lacks shows as absent ("–"), never as a crash."""

    def value(group: str, key: str) -> Any:
        return _num(report.get(group, {}).get(key))

    def scores(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "n": value("questions", name) or 0,
            "score": value("score", name),
            "ci_low": value("score_ci_low", name),
            "ci_high": value("score_ci_high", name),
            "score_excluding_known_bad": value("score_excluding_known_bad", name),
            "evidence_recall": value("evidence_recall", name),
        }

    cost = [
        {
            "phase": phase,
            "calls": value("cost_calls", phase),
            "tokens": value("cost_tokens", phase),
            "estimate_calls": value("estimate_calls", phase),
            "estimate_tokens": value("estimate_tokens", phase),
        }
        for phase in COST_PHASES
    ]
    return {
        "overall": scores("overall"),
        "abilities": [scores(a) for a in ABILITIES],
        "events": {k: _num(events.get(k)) for k in ("event_f1", "event_tau_norm")},
        "cost": cost,
        "failures": report.get("failures"),
        "beam_code": value("score_beam_code", "overall"),
    }


def _judge_check(
    summary: JudgeCheckSummary | None, min_agreement: float | None
) -> dict[str, Any] | None:
    """The judge check's agreement overall and per kind (kinds with a case), with the record's
    warning when it is below `min_agreement`; None when the run has no check."""
    if summary is None:
        return None
    return {
        "agreement": _num(summary.agreement.overall),
        "cases": summary.cases.overall,
        "kinds": [
            {"kind": k, "agreement": _num(summary.agreement.of(k)), "cases": summary.cases.of(k)}
            for k in KINDS
            if summary.cases.of(k)
        ],
        "min_agreement": min_agreement,
        "warning": judge_warning(summary, min_agreement) if min_agreement is not None else None,
    }


def page_data(
    *,
    questions: Sequence[Question],
    rubrics: Sequence[Rubric],
    chats: Sequence[ChatSlice],
    traces: Sequence[Trace],
    judgements: Sequence[Judgement],
    rows: Sequence[Mapping[str, Any]],
    report: Mapping[str, Any],
    judge_summary: Mapping[str, Any],
    graphs: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    confidence: float | None,
    judge_check: JudgeCheckSummary | None = None,
    min_agreement: float | None = None,
) -> dict[str, Any]:
    """Everything the page shows, as plain JSON data (no wall-clock value: same run, same page)."""
    by_rubric = {r.question_id: r for r in rubrics}
    by_trace = {t.question_id: t for t in traces}
    by_judgement = {j.question_id: j for j in judgements}
    by_row = {str(r["question_id"]): r for r in rows}
    missing = [
        q.id
        for q in questions
        if not (q.id in by_rubric and q.id in by_trace and q.id in by_judgement and q.id in by_row)
    ]
    if missing:
        raise DataError(
            f"{len(missing)} question(s) lack a rubric, trace or judgement, e.g. "
            f"{', '.join(missing[:5])}: the run's files are out of step; run `dvc repro`"
        )
    shown = [
        _question(q, by_rubric[q.id], by_trace[q.id], by_judgement[q.id], by_row[q.id])
        for q in questions
    ]
    models = [m for run in runs for m in run.get("models", [])]
    memories = [
        (n, c) for n, c in graphs.items() if n.startswith("conv") and isinstance(c, Mapping)
    ]
    is_graph = any(k in c for _, c in memories for k in GRAPH_KEYS)
    keys = list(GRAPH_KEYS) if is_graph else sorted({k for _, c in memories for k in c})
    return {
        "mode": runs[-1].get("mode") if runs else None,
        "test_model": any(m.get("test_model") for m in models),
        "judge_is_agent": any(m.get("role") == "judge" and m.get("judge_is_agent") for m in models),
        "models": [{"role": m["role"], "model": m["model"]} for m in models],
        "confidence": confidence,
        "headline": _headline(report, judge_summary.get("event_ordering", {})),
        "judge_check": _judge_check(judge_check, min_agreement),
        "system": next((run["system"] for run in runs if run.get("system")), "graphrag"),
        "graphs": [
            {"conversation": name, **{k: counts.get(k) for k in keys}} for name, counts in memories
        ],
        "graph_keys": keys,
        "flags": list(ROW_FLAGS),
        "questions": shown,
        "messages": _messages(chats, shown),
        "licence": LICENCE,
    }


def embed_json(data: Any) -> str:
    """JSON for a <script type="application/json"> element: every `<` escaped (as are the line
    separators JavaScript once refused), so no `</script>` or `<!--` in the data can end it."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def render_page(data: Mapping[str, Any]) -> str:
    """The whole page: inline CSS and JS, the data embedded; a policy that allows only those two
    (by hash) and no request of any kind."""
    policy = (
        "default-src 'none'; base-uri 'none'; form-action 'none'; img-src data:; "
        f"style-src '{_sha256(CSS)}'; script-src '{_sha256(SCRIPT)}'"
    )
    title = html.escape(f"BEAM memory benchmark: {data.get('mode') or 'unknown'} run")
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n"
        "<noscript>This page needs JavaScript to show the run.</noscript>\n"
        '<main id="app"></main>\n'
        f'<script type="application/json" id="run-data">{embed_json(data)}</script>\n'
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


def write_viewer(out: Path = OUT) -> Path:
    """Read the run's files in the working directory and write its page to `out` (atomically)."""
    questions = read_records(Path("data/slice/questions.jsonl"), Question)
    data = page_data(
        questions=questions,
        rubrics=read_records(Path("data/slice/rubrics.jsonl"), Rubric),
        chats=load_chats(Path("data/slice/chats")),
        traces=read_records(Path("data/answer/traces.jsonl"), Trace),
        judgements=read_records(Path("data/judge/judgements.jsonl"), Judgement),
        rows=read_rows(Path("data/judge/questions.jsonl")),
        report=read_json(Path("metrics/report.json")),
        judge_summary=read_json(Path("data/judge/summary.json")),
        graphs=_graph_counts(),
        runs=[read_json(Path(f"data/{stage}/run.json")) for stage in ("ingest", "answer", "judge")],
        confidence=_confidence(),
        judge_check=read_record(JUDGE_CHECK, JudgeCheckSummary) if JUDGE_CHECK.is_file() else None,
        min_agreement=_min_agreement(),
    )
    write_atomic(out, render_page(data))
    return out


CSS = """
:root{--fg:#1d232b;--mute:#5c6773;--line:#d7dde3;--bg:#f6f7f9;--card:#fff;--good:#1f7a3f;
--mid:#a86400;--bad:#b3261e;--accent:#2456a6;font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,sans-serif;color:var(--fg);background:var(--bg)}
body{margin:0}main{max-width:1100px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:17px;margin:22px 0 8px}
h3{font-size:14px;margin:14px 0 6px;color:var(--mute);text-transform:uppercase;letter-spacing:.04em}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:12px 14px}
.warn{background:#fff4d6;border:1px solid #e0b84c;border-radius:6px;padding:10px 14px;margin:8px 0;
font-weight:600}
.fail{background:#fde8e6;border-color:#e3a19b}.ok{color:var(--mute)}
.big{font-size:32px;font-weight:700;margin-right:10px}.mute{color:var(--mute)}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:12px;
align-items:start}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 8px;
border-bottom:1px solid var(--line);vertical-align:top}th{font-weight:600;color:var(--mute)}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.tight td:first-child{white-space:nowrap}
.card{margin:10px 0}.grid>.card{margin:0}
.bar{position:relative;height:12px;width:110px;background:#eef1f4;border-radius:3px}
.bar .fill{position:absolute;left:0;top:0;bottom:0;background:#8fb0e0;border-radius:3px}
.bar .ci{position:absolute;top:5px;height:2px;background:var(--fg)}
.filters{display:flex;flex-wrap:wrap;gap:10px;align-items:end;margin:8px 0 10px}
.filters label{display:flex;flex-direction:column;font-size:12px;color:var(--mute)}
.filters input,.filters select{font:inherit;padding:3px 6px}
.filters input[type=number]{width:70px}
details.q{background:var(--card);border:1px solid var(--line);border-radius:6px;margin:6px 0}
details.q>summary{cursor:pointer;padding:7px 10px;display:flex;gap:10px;align-items:baseline}
details.q>summary .qt{flex:1;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
details.q[open]>summary{border-bottom:1px solid var(--line)}
.body{padding:4px 14px 14px}
.score{display:inline-block;min-width:44px;text-align:center;border-radius:4px;color:#fff;
font-weight:700;padding:0 4px}
.s-good{background:var(--good)}.s-mid{background:var(--mid)}.s-bad{background:var(--bad)}
.chip{display:inline-block;border:1px solid var(--line);border-radius:10px;padding:0 7px;
font-size:12px;color:var(--mute);margin-right:4px;background:#fafbfc}
.chip.flag{border-color:#e3a19b;color:var(--bad)}.id{font-family:ui-monospace,monospace;
font-size:12px}
.text{white-space:pre-wrap;overflow-wrap:anywhere;background:#fafbfc;border:1px solid var(--line);
border-radius:4px;padding:6px 8px;margin:4px 0;max-height:320px;overflow:auto}
pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;background:#f1f3f5;padding:6px 8px;
border-radius:4px;margin:4px 0;max-height:300px;overflow:auto}
code{font-family:ui-monospace,monospace;font-size:12px;overflow-wrap:anywhere}
.call{border-left:3px solid #c5d3ea;padding:2px 0 2px 10px;margin:6px 0}
.err{color:var(--bad)}.hit{color:var(--good);font-weight:600}.miss{color:var(--bad);font-weight:600}
.msg{margin:6px 0}footer{margin-top:28px;font-size:12px;color:var(--mute)}
"""

SCRIPT = r"""
"use strict";
(() => {
const RUN = JSON.parse(document.getElementById("run-data").textContent);
const app = document.getElementById("app");
// Every text of the run goes into the page as a text node: nothing of it is ever parsed as HTML.
function el(tag, cls, ...kids) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  for (const kid of kids) if (kid !== null && kid !== undefined) node.append(kid);
  return node;
}
const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
const int = (x) => (x === null || x === undefined ? "–" : Number(x).toLocaleString("en"));
const label = (s) => String(s).replace(/_/g, " ");
const plural = (n, what) => n + " " + what + (n === 1 ? "" : "s");
const band = (s) => (s >= 0.75 ? "s-good" : s >= 0.25 ? "s-mid" : "s-bad");
const score = (s) => el("span", "score " + band(s), fmt(s, 2));
function table(head, rows, numeric, cls) {
  const t = el("table", cls);
  const hr = el("tr");
  head.forEach((h, i) => hr.append(el("th", numeric[i] ? "n" : "", h)));
  t.append(el("thead", "", hr));
  const body = el("tbody");
  for (const row of rows) {
    const tr = el("tr");
    row.forEach((c, i) => tr.append(el("td", numeric[i] ? "n" : "", c)));
    body.append(tr);
  }
  t.append(body);
  return t;
}
function bar(g) {
  const b = el("div", "bar");
  if (g.score === null) return b;
  const fill = el("div", "fill");
  fill.style.width = (100 * g.score) + "%";
  b.append(fill);
  if (g.ci_low !== null && g.ci_high !== null) {
    const ci = el("div", "ci");
    ci.style.left = (100 * g.ci_low) + "%";
    ci.style.width = Math.max(1, 100 * (g.ci_high - g.ci_low)) + "%";
    b.append(ci);
  }
  return b;
}
const level = RUN.confidence ? Math.round(RUN.confidence * 100) + "% CI" : "interval";

function headline() {
  const h = RUN.headline, o = h.overall;
  app.append(el("h1", "", "BEAM memory benchmark: " + (RUN.mode || "unknown") + " run"));
  if (RUN.test_model) {
    app.append(el("div", "warn", "This run used a test model (scripted/rules): its scores " +
      "measure nothing. It checks that the pipeline runs end to end, not how good any memory " +
      "system is."));
  }
  if (RUN.judge_is_agent) {
    app.append(el("div", "warn", "The judge is the agent's own model: scores are biased upward."));
  }
  const top = el("div", "card");
  top.append(o.score === null ? el("span", "big", "–") : el("span", "big", fmt(o.score)),
    el("span", "", level + " " + fmt(o.ci_low) + "–" + fmt(o.ci_high) + " · " + o.n +
      " questions · excluding known-bad rubrics " + fmt(o.score_excluding_known_bad) +
      " · evidence recall " + fmt(o.evidence_recall)),
    el("div", "beam-code", "Benchmark-code score (beam_code: the benchmark's own " +
      "compute_metrics over the same verdicts) " + fmt(h.beam_code)));
  app.append(top);
  const jc = RUN.judge_check;
  if (jc) {
    const pct = (x) => (x === null || x === undefined ? "–" : Math.round(x * 100) + "%");
    const kinds = jc.kinds.map((k) => label(k.kind) + " " + pct(k.agreement) + " of " + k.cases);
    app.append(el("div", "judge-check " + (jc.warning ? "warn" : "card ok"),
      "Judge check: agreement " + pct(jc.agreement) + " on " + plural(jc.cases, "known case") +
      (kinds.length ? " (" + kinds.join(", ") + ")" : "") +
      (jc.min_agreement === null ? "" : ", threshold " + pct(jc.min_agreement)) +
      (jc.warning ? ". Warning: " + jc.warning : ".")));
  }
  if (h.failures) {
    const failed = Object.entries(h.failures);
    const model = failed.filter(([k]) => k !== "tool_errors").reduce((a, [, v]) => a + v, 0);
    const text = failed.map(([k, v]) => int(v) + " " + label(k)).join(", ");
    app.append(el("div", model ? "warn fail" : "card ok",
      (model ? model + " model calls failed after retries; their items scored 0" :
        "No model call failed") + " (failed: " + text + ")."));
  }
  const grid = el("div", "grid");
  const abilities = el("div", "card");
  abilities.append(el("h3", "", "Score per ability"), table(
    ["ability", "n", "", "score", level],
    h.abilities.map((g) => [label(g.name), String(g.n), bar(g), fmt(g.score),
      g.ci_low === null ? "–" : fmt(g.ci_low) + "–" + fmt(g.ci_high)]),
    [false, true, false, true, false], "tight"));
  const ev = h.events || {};
  if (ev.event_f1 !== null && ev.event_f1 !== undefined) {
    abilities.append(el("p", "mute", "Event ordering: F1 " + fmt(ev.event_f1) + ", tau_norm " +
      fmt(ev.event_tau_norm) + " (score = F1 × tau_norm)."));
  }
  const cost = el("div", "card");
  const planned = h.cost.some((c) => c.estimate_calls !== null || c.estimate_tokens !== null);
  cost.append(el("h3", "", "Cost per phase"), table(
    ["phase", "calls", "tokens", ...(planned ? ["est. calls", "est. tokens"] : [])],
    h.cost.map((c) => [label(c.phase), int(c.calls), int(c.tokens),
      ...(planned ? [int(c.estimate_calls), int(c.estimate_tokens)] : [])]),
    [false, true, true, true, true]));
  cost.append(el("p", "mute", "Calls and tokens this run made (cache hits were free)."));
  cost.append(el("h3", "", "Models"), table(["role", "model"],
    [["memory system", el("code", "", RUN.system)],
      ...RUN.models.map((m) => [m.role, el("code", "", m.model)])], [false, false]));
  grid.append(abilities, cost);
  app.append(grid);
  const graphs = el("div", "card");
  const keys = RUN.graph_keys;
  const title = RUN.system === "graphrag" ? "Graph" : "Memory (" + RUN.system + ")";
  graphs.append(el("h3", "", title + " per conversation"),
    table(["conversation", ...keys.map(label)],
    RUN.graphs.map((g) => [g.conversation, ...keys.map((k) => int(g[k]))]),
    [false, ...keys.map(() => true)]));
  app.append(graphs);
}

const messages = RUN.messages;
function message(conv, id, status) {
  const m = messages[conv + ":" + id];
  const box = el("div", "msg");
  const head = el("div", "", el("span", "id", "message " + id), " ");
  if (status) head.append(status, " ");
  if (m) head.append(el("span", "mute", m.role + " · session " + m.session + " · " + m.date));
  box.append(head, m ? el("div", "text", m.text) : el("div", "mute", "(not in the slice)"));
  return box;
}

function details(summary, ...kids) {
  const d = el("details", "", el("summary", "", summary));
  d.append(...kids);
  return d;
}

function questionBody(q) {
  const body = el("div", "body");
  body.append(el("h3", "", "Question"), el("div", "text", q.question));
  body.append(el("h3", "", "Answer"));
  if (q.error) body.append(el("div", "err", "The agent's model call failed: " + q.error));
  body.append(q.answer ? el("div", "text answer", q.answer) : el("div", "mute", "(empty answer)"));
  if (q.known_bad_reason) {
    body.append(el("div", "warn", "Known bad rubric: " + q.known_bad_reason));
  }
  body.append(el("h3", "", "Rubric (" + plural(q.judge_calls, "judge call") + ")"));
  body.append(table(["rubric item", "score", "judge's reason"], q.items.map((it) => {
    const why = el("div", "", it.reason || "");
    if (it.error) why.append(el("div", "err", it.error));
    if (it.reply !== null) why.append(details("judge's reply", el("pre", "", it.reply)));
    return [el("span", "item", it.item), score(it.score), why];
  }), [false, true, false]));
  if (q.event) {
    const e = q.event;
    body.append(el("h3", "", "Event alignment"));
    body.append(table(["#", "answer line", "matched rubric event"], e.lines.map((line, k) => {
      const m = e.matches[k];
      return [String(k + 1), line, m === null ? el("span", "miss", "no match") :
        el("span", "", el("span", "hit", "event " + (m + 1) + ": "), q.items[m].item)];
    }), [true, false, false]));
    body.append(el("p", "mute", "precision " + fmt(e.precision) + ", recall " + fmt(e.recall) +
      ", F1 " + fmt(e.f1) + ", tau_b " + fmt(e.tau_b) + ", tau_norm " + fmt(e.tau_norm) + "; " +
      plural(e.calls, "equivalence call") +
      (e.failed_calls ? ", " + e.failed_calls + " failed" : "") +
      (e.capped ? ", stopped at the call cap" : "")));
  }
  const a = q.agent;
  body.append(el("h3", "", "Agent steps"), el("p", "mute", plural(a.calls, "model call") + ", " +
    plural(a.steps, "tool call") + ", " + int(a.prompt_tokens) + " prompt and " +
    int(a.completion_tokens) + " completion tokens, largest context " +
    int(a.max_context_tokens) + " tokens"));
  const steps = el("ol");
  for (const turn of q.turns) {
    const li = el("li");
    if (turn.text) li.append(el("div", "text", turn.text));
    for (const c of turn.calls) {
      const call = el("div", "call", el("code", "", c.name + "(" + c.arguments + ")"));
      call.append(" ", el("span", "chip", plural(c.ids, "node")));
      if (c.source === "text") call.append(el("span", "chip", "written as text"));
      if (c.message_ids.length) {
        call.append(el("span", "chip", "messages " + c.message_ids.join(", ")));
      }
      if (c.error) call.append(el("div", "err", c.error));
      call.append(details("result (" + c.result.length + " characters)", el("pre", "", c.result)));
      li.append(call);
    }
    steps.append(li);
  }
  if (!q.turns.length) steps.append(el("li", "mute", "no tool call"));
  steps.append(el("li", "mute", q.error ? "no answer: the model call failed" :
    "the answer (above)"));
  body.append(steps);
  const reached = new Set(q.reached);
  body.append(el("h3", "", "Evidence (recall " + fmt(q.evidence_recall) + ")"));
  if (!q.needed.length) body.append(el("p", "mute", "The question needs no message."));
  for (const id of q.needed) {
    body.append(message(q.conversation, id,
      reached.has(id) ? el("span", "hit", "reached") : el("span", "miss", "not reached")));
  }
  const extra = q.reached.filter((id) => !q.needed.includes(id));
  if (extra.length) {
    const list = el("div");
    for (const id of extra) list.append(message(q.conversation, id, null));
    body.append(details("other messages the agent reached: " + extra.join(", "), list));
  }
  return body;
}

function questions() {
  const qs = RUN.questions;
  app.append(el("h2", "", "Questions"));
  const filters = el("div", "filters");
  const pick = (name, options) => {
    const s = el("select");
    s.name = name;
    for (const [value, text] of options) {
      const o = el("option", "", text);
      o.value = value;
      s.append(o);
    }
    filters.append(el("label", "", name, s));
    return s;
  };
  const count = (f) => qs.filter(f).length;
  const abilities = [...new Set(qs.map((q) => q.ability))].sort();
  const ability = pick("ability", [["", "all (" + qs.length + ")"],
    ...abilities.map((a) => [a, label(a) + " (" + count((q) => q.ability === a) + ")"])]);
  const missed = (q) => q.evidence_recall !== null && q.evidence_recall < 1;
  const flag = pick("flag", [["", "any"], ["-", "no flag (" + count((q) => !q.flags.length) + ")"],
    ["+", "some flag (" + count((q) => q.flags.length > 0) + ")"],
    ...RUN.flags.map((f) => [f, label(f) + " (" + count((q) => q.flags.includes(f)) + ")"]),
    ["evidence_missed", "evidence missed (" + count(missed) + ")"]]);
  const number = (name, value) => {
    const i = el("input");
    Object.assign(i, { type: "number", min: "0", max: "1", step: "0.05", value, name });
    filters.append(el("label", "", name, i));
    return i;
  };
  const low = number("score from", "0"), high = number("score to", "1");
  const search = el("input");
  Object.assign(search, { type: "search", name: "search", placeholder: "words in question, " +
    "answer or id" });
  filters.append(el("label", "", "search", search));
  const shown = el("span", "mute");
  filters.append(shown);
  app.append(filters);
  const list = el("div");
  const rows = qs.map((q) => {
    const sum = el("summary", "", score(q.score), el("span", "id", q.id));
    for (const f of q.flags) sum.append(el("span", "chip flag", label(f)));
    sum.append(el("span", "qt", q.question));
    const d = el("details", "q", sum);
    d.id = q.id;
    d.addEventListener("toggle", () => {
      if (d.open && !d.querySelector(".body")) d.append(questionBody(q));
    });
    list.append(d);
    return { q, d, text: (q.id + "\n" + q.question + "\n" + q.answer).toLowerCase() };
  });
  app.append(list);
  function apply() {
    const a = ability.value, f = flag.value, words = search.value.toLowerCase().trim();
    const lo = low.value === "" ? 0 : Number(low.value);
    const hi = high.value === "" ? 1 : Number(high.value);
    let n = 0;
    for (const { q, d, text } of rows) {
      const ok = (!a || q.ability === a) &&
        (!f || (f === "-" ? !q.flags.length : f === "+" ? q.flags.length > 0 :
          f === "evidence_missed" ? missed(q) : q.flags.includes(f))) &&
        q.score >= lo - 1e-9 && q.score <= hi + 1e-9 &&
        (!words || words.split(/\s+/).every((w) => text.includes(w)));
      d.hidden = !ok;
      n += ok;
    }
    shown.textContent = n + " of " + rows.length + " questions shown";
  }
  for (const input of [ability, flag, low, high, search]) input.addEventListener("input", apply);
  apply();
  const wanted = decodeURIComponent(location.hash.slice(1));
  const target = rows.find((r) => r.q.id === wanted);
  if (target) { target.d.open = true; target.d.scrollIntoView(); }
}

headline();
questions();
app.append(el("footer", "", RUN.licence));
})();
"""
