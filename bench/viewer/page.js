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
  app.append(el("h1", "", "BEAM memory benchmark: " + (RUN.mode || "unknown") + " run" +
    (RUN.reads_gold ? " (reads gold evidence: an upper bound)" : "")));
  if (RUN.reads_gold) {
    app.append(el("div", "warn fail", "This run reads gold evidence: " + RUN.system +
      " is given each question's cited messages (the rubrics' source_chat_ids). Its score is " +
      "an upper bound, the answer model's ceiling with perfect memory, not a memory system's " +
      "score: never report it as a headline."));
  }
  if (RUN.annotated) {
    app.append(el("div", "warn fail", "The answerer saw judge-side annotations " +
      "(answer.protocol exabase): each question came with ExaBase's guidance, built from the " +
      "dataset's annotations for the judge. Never compare it with a run where the answerer " +
      "sees the question alone."));
  }
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
  if (RUN.leak_check) {
    const leak = RUN.leak_check.startsWith("LEAK");
    app.append(el("div", leak ? "warn fail" : "card ok", "Leak check: " + RUN.leak_check + "."));
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
  if (RUN.protocols && RUN.protocols.length) {
    // the same answers under each scoring protocol: ability × protocol, each with its judge
    const ps = RUN.protocols;
    const card = el("div", "card protocols");
    card.append(el("h3", "", "Scores per protocol"), table(
      ["ability", ...ps.map((p) => p.protocol + " (judge " + p.judge_model + ")")],
      [...ps[0].abilities.map((a, i) => [label(a.name), ...ps.map((p) => fmt(p.abilities[i].score))]),
        ["overall (micro)", ...ps.map((p) => fmt(p.micro))],
        ["overall (macro)", ...ps.map((p) => fmt(p.macro))]],
      [false, ...ps.map(() => true)], "tight"));
    for (const p of ps) card.append(el("p", "mute", p.protocol + ": " + p.label + "."));
    app.append(card);
  }
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
