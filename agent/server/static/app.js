// aidai web page: start a diagnosis, follow its events (server-sent events read with fetch, so the bearer token
// travels in a header), draw the taxonomy search as a tree, answer approvals and questions, show the ticket.
"use strict";

const $ = (id) => document.getElementById(id);
// lastSeq: the id of the last event drawn; an event at or before it (a reconnect's overlap, a second stream) is
// never drawn twice. gen: which openRun is current, so a slower earlier one cannot start a second stream.
const state = { runId: null, abort: null, nodes: new Map(), judgements: new Map(), selected: null, pending: null, role: "",
  lastSeq: 0, gen: 0, status: null };
const REFRESH_RUNS_MS = 5000;

function token() { return localStorage.getItem("aidai-token") || ""; }
function headers(extra = {}) {
  const t = token();
  return t ? { ...extra, Authorization: `Bearer ${t}` } : extra;
}
async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (response.status === 401) { $("token-form").hidden = false; }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(`${response.status}: ${detail}`);
  }
  return response;
}
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
const short = (label) => (label ? label.split(".").pop() : "ROOT");

// ---- set-up -------------------------------------------------------------------------------------------------
async function init() {
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault(); localStorage.setItem("aidai-token", $("token").value.trim()); location.reload();
  });
  $("new-run").addEventListener("submit", startRun);
  $("refresh").addEventListener("click", loadRuns);
  $("approve").addEventListener("click", () => approve(true));
  $("decline").addEventListener("click", () => approve(false));
  $("send-answer").addEventListener("click", sendAnswer);
  $("copy").addEventListener("click", () => navigator.clipboard.writeText($("ticket").textContent));
  try {
    const me = await (await api("/api/me")).json();
    $("who").textContent = `${me.name} (${me.role})`;
    state.role = me.role;
    const hosts = await (await api("/api/hosts")).json();
    hosts.hosts.forEach((spec, i) => {
      const id = `host-${i}`;
      $("hosts").append(el("div", {}, el("input", { type: "checkbox", id, value: spec, name: "hosts" }),
        " ", el("label", { for: id, class: "inline" }, spec)));
      if (i === 0) $(id).checked = true;
    });
    await loadRuns();
    setInterval(() => { if (!document.hidden) loadRuns().catch(() => {}); }, REFRESH_RUNS_MS);
    const wanted = new URLSearchParams(location.search).get("run");
    if (wanted) openRun(wanted);
  } catch (err) { $("form-error").textContent = err.message; }
}

// one status everywhere: the run list, the header and the API's run record all show the store's status column; the
// open run's entry follows its event stream (status events are written from that column), the others are polled
function statusTitle(status, waitingFor) {
  return status === "waiting" && waitingFor ? `waits for ${waitingFor === "approval" ? "an operator's approval" : "an answer"}` : "";
}
function statusBadge(status, waitingFor) {
  return el("span", { class: `status ${status}`, title: statusTitle(status, waitingFor) }, status);
}
async function loadRuns() {
  const { runs } = await (await api("/api/runs?limit=50")).json();
  $("runs").replaceChildren(...runs.map((r) => {
    const open = r.id === state.runId && state.status;  // the open run: what its stream said last (newer or equal)
    return el("li", { "data-run": r.id, onclick: () => openRun(r.id) },
      open ? statusBadge(state.status.status, state.status.waitingFor) : statusBadge(r.status, r.waiting_for),
      " ", r.title || r.id, r.root_causes.length ? el("div", { class: "dim" }, r.root_causes[0]) : "");
  }));
}

async function startRun(e) {
  e.preventDefault();
  $("form-error").textContent = "";
  const form = new FormData();
  form.append("incident", $("incident").value);
  form.append("environment", $("environment").value);
  form.append("approval", $("approval").value);
  document.querySelectorAll("#hosts input:checked").forEach((box) => form.append("hosts", box.value));
  if ($("file").files[0]) form.append("file", $("file").files[0]);
  for (const f of $("logs").files) form.append("logs", f);
  try {
    const { id } = await (await api("/api/runs", { method: "POST", body: form })).json();
    history.replaceState(null, "", `?run=${id}`);
    openRun(id);
    loadRuns();
  } catch (err) { $("form-error").textContent = err.message; }
}

// ---- one run ------------------------------------------------------------------------------------------------
async function openRun(id) {
  if (state.abort) state.abort.abort();
  state.abort = null;
  const gen = ++state.gen;
  Object.assign(state, { runId: id, nodes: new Map(), judgements: new Map(), selected: null, pending: null, lastSeq: 0, status: null });
  ["tree", "timeline", "evidence"].forEach((k) => $(k).replaceChildren());
  $("board").tBodies[0].replaceChildren();
  $("ticket-box").hidden = $("approval-box").hidden = $("question-box").hidden = true;
  $("run").hidden = false;
  $("run-id").textContent = id;
  const run = await (await api(`/api/runs/${id}`)).json();
  if (gen !== state.gen) return;  // another run (or this one again) was opened meanwhile: that one streams
  $("run-title").textContent = run.title || id;
  setStatus(run.status, run.waiting_for);
  follow(id, gen);
}

async function follow(id, gen) {
  const controller = new AbortController();
  state.abort = controller;
  const current = () => !controller.signal.aborted && gen === state.gen;
  while (current()) {  // reconnect after a dropped stream, from the last event drawn
    try {
      const response = await fetch(`/api/runs/${id}/events?after=${state.lastSeq}`,
        { headers: headers({ "Last-Event-ID": String(state.lastSeq) }), signal: controller.signal });
      if (!response.ok) throw new Error(`events: ${response.status}`);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
          const msg = { event: "message", data: "", id: null };
          for (const line of block.split("\n")) {
            const i = line.indexOf(":"); if (i <= 0) continue;
            const key = line.slice(0, i), val = line.slice(i + 1).replace(/^ /, "");
            if (key === "event") msg.event = val; else if (key === "data") msg.data += val; else if (key === "id") msg.id = val;
          }
          if (!current()) return;
          if (msg.event === "end") { finish(id); return; }
          if (msg.id) {
            const seq = Number(msg.id);
            if (seq <= state.lastSeq) continue;  // already drawn
            state.lastSeq = seq;
          }
          if (msg.data) handle(JSON.parse(msg.data));
        }
      }
    } catch (err) {
      if (!current()) return;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

function setStatus(status, waitingFor = null) {
  state.status = { status, waitingFor };
  $("run-status").textContent = status;
  $("run-status").className = `status ${status}`;
  $("run-status").title = statusTitle(status, waitingFor);
  const entry = document.querySelector(`#runs li[data-run="${CSS.escape(state.runId || "")}"] .status`);
  if (entry) entry.replaceWith(statusBadge(status, waitingFor));
}

function log(text) { $("timeline").append(el("li", {}, text)); }

// ---- events -> tree, board, timeline ------------------------------------------------------------------------
function node(label) {
  if (!state.nodes.has(label)) {
    const parent = label.includes(".") ? label.slice(0, label.lastIndexOf(".")) : "";
    if (parent) node(parent);
    state.nodes.set(label, { label, parent, status: "queued", results: [], checks: [], skipped: [], judgement: null });
  }
  return state.nodes.get(label);
}
function mark(label, status) {
  const n = node(label);
  const final = ["confirmed", "rejected", "inconclusive"];
  if (final.includes(n.status) && !final.includes(status)) return;
  n.status = status;
}
function settleRunning(except) {
  for (const n of state.nodes.values()) if (n.status === "running" && n.label !== except) n.status = "visited";
}

function handle(e) {
  switch (e.type) {
    case "status": setStatus(e.status, e.waiting_for); if (e.status !== "waiting") hideAsks(); break;
    case "summary": log(`incident: ${e.title}`); break;
    case "pretriage": e.results.forEach((t) => log(`pre-triage ${t.tool}: ${t.summary || t.reason || t.status}`)); break;
    case "history": log(e.similar.length ? `pipeline 1: similar past incidents ${e.similar.slice(0, 3).map((p) => `${p.label} ${p.score.toFixed(2)}`).join(", ")}` : "pipeline 1: no similar past incident"); break;
    case "rank":
      for (const c of e.ranked) { if (!c.keep) mark(c.label, "pruned"); else node(c.label); }
      log(`ranked children of ${short(e.node)}: ${e.ranked.map((c) => `${short(c.label)} ${c.score.toFixed(2)}${c.keep ? "" : " (pruned)"}`).join(", ")}`);
      break;
    case "hypothesis": settleRunning(e.node); mark(e.node, "running"); log(`pipeline 2: ${e.node}`); break;
    case "checks": settleRunning(e.node); mark(e.node, "running"); node(e.node).checks.push(...e.checks); break;
    case "result": {
      const n = node(e.node);
      n.results = n.results.filter((r) => !(r.check === e.check && r.host === e.host)).concat([e]);
      if (!e.cached) log(`${e.verdict} ${e.check}@${e.host}: ${e.summary}`);
      break;
    }
    case "skipped": node(e.node).skipped.push(...e.checks); break;
    case "judgement":
      mark(e.label, e.status); state.judgements.set(e.label, e); node(e.label).judgement = e;
      log(`${e.status} ${e.label} (${Number(e.confidence).toFixed(2)}): ${e.why}`);
      break;
    case "widen": log("nothing confirmed yet: searching every branch with an untested leaf"); break;
    case "exploration": log(`pipeline 3: ${e.hypotheses.length} suggestion(s) from the knowledge base`); break;
    case "conclusion": settleRunning(null); log(e.resolved ? `resolved: ${e.root_causes.map((c) => `${c.label} (${(e.levels || {})[c.label] || "confirmed"})`).join(", ")}` : `unresolved: escalate${(e.suspected || []).length ? `; suspected (not checked): ${e.suspected.map((s) => s.label).join(", ")}` : ""}`); break;
    case "approval": showApproval(e); break;
    case "question": showQuestion(e); break;
    case "answered": log(answeredText(e)); hideAsks(); break;
    case "recovered": log(e.message); break;
    case "error": log(`error: ${e.message}`); break;
    default: break;
  }
  render();
}

// an approval answer says what was decided: "declined: dcgm_diag" is not "answered"
function answeredText(e) {
  if (e.kind !== "approval") return `answered by ${e.by}: ${e.text ? e.text : "(empty: escalate)"}`;
  const checks = Object.entries(e.checks || {}).filter(([k]) => k !== "approved_by");
  const approved = e.approved || checks.filter(([, v]) => v === true).map(([k]) => k);
  const declined = e.declined || checks.filter(([, v]) => v !== true).map(([k]) => k);
  const parts = [];
  if (approved.length) parts.push(`approved: ${approved.join(", ")}`);
  if (declined.length) parts.push(`declined: ${declined.join(", ")}`);
  return `${parts.join("; ") || "declined: nothing was asked"} (by ${e.by})`;
}

function render() {
  const children = new Map();
  for (const n of state.nodes.values()) {
    if (!children.has(n.parent)) children.set(n.parent, []);
    children.get(n.parent).push(n);
  }
  const build = (parent) => (children.get(parent) || []).map((n) => {
    const label = el("span", { class: `node ${n.status}${state.selected === n.label ? " selected" : ""}`,
      "data-label": n.label, "data-status": n.status, title: n.label, onclick: () => select(n.label) }, short(n.label));
    const sub = build(n.label);
    return el("li", {}, label, sub.length ? el("ul", {}, ...sub) : "");
  });
  $("tree").replaceChildren(...build(""));
  $("board").tBodies[0].replaceChildren(...[...state.judgements.values()].map((j) => el("tr", { "data-label": j.label },
    el("td", {}, j.label), el("td", { class: `node ${j.status}` }, j.status), el("td", {}, Number(j.confidence).toFixed(2)),
    el("td", {}, (j.evidence.matched || []).join("\n")), el("td", {}, (j.evidence.rejected_by || []).join(", ")))));
  if (state.selected) select(state.selected, false);
}

function select(label, redraw = true) {
  state.selected = label;
  const n = state.nodes.get(label);
  $("evidence-node").textContent = label;
  const parts = [];
  if (n.judgement) {
    parts.push(el("p", {}, el("b", {}, n.judgement.status), ` (${Number(n.judgement.confidence).toFixed(2)}): ${n.judgement.why}`));
    const ev = n.judgement.evidence;
    if (ev.matched.length) parts.push(el("p", {}, "for: ", ev.matched.join("; ")));
    if (ev.rejected_by.length) parts.push(el("p", {}, "against (passed): ", ev.rejected_by.join(", ")));
    if (ev.unknown.length) parts.push(el("p", {}, "undecided: ", ev.unknown.join(", ")));
  }
  if (n.results.length) {
    parts.push(el("table", {}, el("tr", {}, el("th", {}, "check"), el("th", {}, "host"), el("th", {}, "verdict"), el("th", {}, "summary")),
      ...n.results.map((r) => el("tr", {}, el("td", {}, r.check), el("td", {}, r.host),
        el("td", { class: `v-${r.verdict}` }, r.verdict), el("td", {}, r.summary)))));
  }
  if (n.skipped.length) parts.push(el("p", { class: "dim" }, `skipped (active): ${[...new Set(n.skipped)].join(", ")}`));
  if (!parts.length) parts.push(el("p", { class: "dim" }, `${n.status}: no check ran on this node`));
  $("evidence").replaceChildren(...parts);
  if (redraw) render();
}

// ---- approvals and questions --------------------------------------------------------------------------------
function hideAsks() { $("approval-box").hidden = $("question-box").hidden = true; }
function showApproval(e) {
  state.pending = e;
  // what the answer would change (the graph says it: decide an undecided cause, or which of two comes first)
  $("approval-node").textContent = e.purpose ? `${e.node}: ${e.purpose}` : e.node;
  // the server says which checks to pre-tick (suggested) and why; an unticked one can still be ticked
  $("approval-checks").replaceChildren(...e.checks.map((c) => {
    const suggested = c.suggested !== false;
    const box = el("input", { type: "checkbox", id: `approve-${c.id}`, value: c.id, "data-suggested": String(suggested) });
    box.checked = suggested;
    return el("li", { class: suggested ? "suggested" : "not-suggested" }, box, " ",
      el("label", { for: `approve-${c.id}`, class: "inline" }, `${c.id} (${c.tier}, about ${Math.round(c.expected_cost_s)} s): ${c.description}`),
      c.why ? el("div", { class: "why", id: `why-${c.id}` }, c.why) : "");
  }));
  // a viewer sees what waits for approval but cannot give it (the API would answer 403)
  const operator = state.role === "operator";
  $("approve").disabled = $("decline").disabled = !operator;
  $("approval-note").hidden = operator;
  $("approval-box").hidden = false;
}
function showQuestion(e) {
  $("question").textContent = e.question;
  $("suggestions").replaceChildren(...(e.hypotheses || []).map((h) => el("li", {}, el("b", {}, h.title), ` ${h.why || ""}`)));
  $("question-box").hidden = false;
}
async function approve(yes) {
  const checks = {};
  document.querySelectorAll("#approval-checks input").forEach((box) => { checks[box.value] = yes && box.checked; });
  try {
    await api(`/api/runs/${state.runId}/approve`, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ checks }) });
    hideAsks();
  } catch (err) { log(`approval refused: ${err.message}`); }
}
async function sendAnswer() {
  try {
    await api(`/api/runs/${state.runId}/answer`, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ answer: $("answer").value }) });
    hideAsks();
  } catch (err) { log(`answer refused: ${err.message}`); }
}

// ---- the end: report and ticket -----------------------------------------------------------------------------
async function finish(id) {
  const gen = state.gen;
  const run = await (await api(`/api/runs/${id}`)).json();
  if (gen !== state.gen) return;
  setStatus(run.status, run.waiting_for);
  settleRunning(null); render();
  if (run.status === "failed") { log(`failed: ${run.error}`); return; }
  const md = await (await api(`/api/runs/${id}/ticket?format=md&channel=page`)).text();
  $("ticket").textContent = md;
  $("download").href = URL.createObjectURL(new Blob([md], { type: "text/markdown" }));
  $("download").download = `aidai-ticket-${id}.md`;
  $("ticket-box").hidden = false;
  loadRuns();
}

init();
