// The stage page (§17): dialog, flow picture and perspective switch, fed by the stage's JSON
// routes and its event stream. No build step: plain browser JavaScript plus vendored Mermaid.
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("token") || "";
const stage = {
  session: params.has("session") ? Number(params.get("session")) : null,
  seat: "",
  seats: [],
  summary: null,
  nodes: new Map(), // chart node id → its <g> in the drawn flow
  shownCount: -1,
  loading: false,
  again: false,
  state: null,
  choosing: null, // the session lookup in progress
  events: null, // the event stream of the perspective shown
};

function api(path, options = {}) {
  const headers = { "X-Stage-Token": token, "Content-Type": "application/json" };
  return fetch(path, { ...options, headers }).then(async (response) => {
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  });
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function colourOf(name) {
  const index = stage.seats.findIndex((s) => s.name === name || s.soul === name);
  if (index < 0) return "#6b7280";
  return `hsl(${Math.round((index * 137.508) % 360)}, 62%, 36%)`;
}

// ------------------------------------------------------------------ sessions

async function chooseSession() {
  const { sessions } = await api("/api/sessions");
  if (sessions.length === 1 && !sessions[0].children.length) return openSession(sessions[0].session);
  if (sessions.length === 0) return; // a live run that has not opened its session yet
  document.getElementById("session-list").replaceChildren(...sessions.map(sessionItem));
  document.getElementById("sessions").hidden = false;
}

// A session of the list and, under it, the sessions forked from it (§16.4a): a tree of forks.
function sessionItem(s) {
  const label = `session ${s.session}: ${s.title || s.script || "untitled"} (${s.status})`;
  const item = el("li", { "data-session": s.session }, el("a", { href: sessionHref(s.session), text: label }));
  if (s.parent !== null && s.parent !== undefined) {
    item.append(el("span", { class: "branch", text: ` ${branchText(s)}` }));
  }
  if (s.children.length) item.append(el("ul", {}, ...s.children.map(sessionItem)));
  return item;
}

function sessionHref(number) {
  return `?token=${encodeURIComponent(token)}&session=${number}`;
}

function branchText(s) {
  const at = s.branch_turn === null || s.branch_turn === undefined ? "" : ` after turn ${s.branch_turn}`;
  return `branched from session ${s.parent}${at}`;
}

async function openSession(number) {
  const info = await api(`/api/sessions/${number}`);
  stage.session = number;
  stage.summary = info;
  stage.seats = info.seats;
  document.getElementById("sessions").hidden = true;
  document.getElementById("columns").hidden = false;
  document.getElementById("perspective").hidden = false;
  document.getElementById("title").textContent =
    `${info.title || info.script || "fems"} · session ${number}`;
  const select = document.getElementById("seat");
  select.replaceChildren(
    el("option", { value: "", text: "Director (everything)" }),
    ...info.seats.map((s) => el("option", { value: s.name, text: `${s.name} (${s.type})` }))
  );
  select.value = stage.seat;
  showLineage(info);
  await drawFlow(info.chart);
  showStatus();
  await refreshDialog();
}

// Where the session branched (§16.4a): its parent, linked when this stage can open it.
function showLineage(info) {
  const note = document.getElementById("lineage");
  note.hidden = info.parent === null || info.parent === undefined;
  if (note.hidden) return;
  const parent = info.parent_here
    ? el("a", { href: sessionHref(info.parent), text: `session ${info.parent}` })
    : `session ${info.parent}`;
  const at = info.branch_turn === null || info.branch_turn === undefined ? "" : ` after its turn ${info.branch_turn}`;
  note.replaceChildren("This session branched from ", parent, `${at}: its turns up to there are the parent's, replayed.`);
}

// ------------------------------------------------------------------ dialog

async function refreshDialog() {
  if (stage.session === null) return;
  if (stage.loading) {
    stage.again = true;
    return;
  }
  stage.loading = true;
  try {
    const seat = stage.seat;
    const query = seat ? `?seat=${encodeURIComponent(seat)}` : "";
    const { messages, last_call: lastCall } = await api(
      `/api/sessions/${stage.session}/messages${query}`
    );
    if (seat === stage.seat) showDialog(messages, lastCall);
  } catch (error) {
    lostContact(error);
  } finally {
    stage.loading = false;
    if (stage.again) {
      stage.again = false;
      refreshDialog();
    }
  }
}

function showDialog(messages, lastCall) {
  const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  const seat = stage.seats.find((s) => s.name === stage.seat);
  document.getElementById("view-note").textContent = seat
    ? `${seat.name}'s view: exactly the messages ${seat.type === "human" ? "this person is shown" : "its model receives"} as context (§13.2), read from the store. ${messages.length} messages.`
    : `Director's view: every stored message, with the souls that may see it. ${messages.length} messages.`;
  const items = messages.map(messageItem);
  markTurnEnds(messages, items);
  if (lastCall) items.unshift(lastCallItem(seat.name, lastCall));
  document.getElementById("dialog").replaceChildren(...items);
  showWriting();
  if (atBottom) window.scrollTo(0, document.body.scrollHeight);
}

// The replies being written (§17.1), after the stored messages: each under its speaker with a
// "writing…" marker until the stored reply replaces it. The server sends each perspective only
// the replies of rooms its seat is in, and their reasoning to the director only.
function showWriting() {
  const dialog = document.getElementById("dialog");
  for (const item of dialog.querySelectorAll("li.writing")) item.remove();
  const state = stage.state;
  if (!state || state.seat !== stage.seat) return;
  const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  for (const reply of state.writing || []) dialog.append(writingItem(reply));
  if (atBottom) window.scrollTo(0, document.body.scrollHeight);
}

function writingItem(reply) {
  const item = el("li", {
    class: "msg reply writing",
    "data-kind": "writing",
    "data-action": reply.action,
    "data-speaker": reply.speaker,
    "data-turn": reply.turn,
  });
  item.style.setProperty("--colour", colourOf(reply.soul || reply.speaker));
  const where = [reply.action, `turn ${reply.turn}`].join(" · ");
  item.append(el("span", { class: "who", text: reply.speaker }), el("span", { class: "meta", text: where }));
  if (!reply.done) item.append(el("span", { class: "marker", text: "writing…" }));
  // a reply that runs long without max_tokens (§15.4): the warning shows above its text
  if (reply.warning) item.append(el("div", { class: "warning", text: reply.warning }));
  item.append(el("div", { class: "text", text: reply.text }));
  if (reply.reasoning) item.append(reasoningFold(reply.reasoning));
  return item;
}

// An actor's last model call as it was sent: persona, memory and context methods included.
function lastCallItem(actor, call) {
  const summary = `${actor}'s last model call (${call.action}, ${call.model}), exactly as sent: ${call.messages.length} messages`;
  const blocks = call.messages.map((m) =>
    el("div", { class: "text", "data-role": m.role }, el("strong", { text: `[${m.role}] ` }), m.content || "")
  );
  return el("li", { class: "msg prompt last-call" }, el("details", {}, el("summary", { text: summary }), ...blocks));
}

function messageItem(m) {
  const kind = m.kind.startsWith("tool") ? "tool" : m.kind;
  const item = el("li", {
    class: `msg ${kind}`,
    "data-kind": m.kind,
    "data-action": m.action,
    "data-speaker": m.speaker,
    "data-seq": m.seq,
  });
  const where = [m.action, m.turn ? `turn ${m.turn}` : null].filter(Boolean).join(" · ");
  if (kind === "prompt" || kind === "tool" || kind === "reasoning") {
    const title = {
      prompt: `prompt to ${m.speaker || "the model"}`,
      reasoning: `${m.speaker}'s reasoning, private (${m.content.length} characters)`,
    }[kind] || `${m.kind.replace("_", " ")}${m.speaker ? ` by ${m.speaker}` : ""}`;
    item.append(
      el("details", {}, el("summary", { text: `${title} · ${where}` }), el("div", { class: "text", text: m.content }))
    );
  } else {
    if (kind !== "narration") item.style.setProperty("--colour", colourOf(m.soul || m.speaker));
    const who = kind === "narration" ? "Narrator" : m.speaker || kind;
    item.append(el("span", { class: "who", text: who }), el("span", { class: "meta", text: where }));
    item.append(el("div", { class: "text", text: m.content }));
  }
  if (m.reasoning) item.append(reasoningFold(m.reasoning));
  if (m.seen_by && kind !== "prompt") {
    const seen = [...m.seen_by.souls, ...m.seen_by.users.map((u) => `user ${u}`)];
    item.append(el("div", { class: "seen", text: `seen by: ${seen.join(", ") || "nobody"}` }));
  }
  return item;
}

// The last message shown of each turn gets the turn's "fork here" command lines (§16.4a):
// a new session that replays this session's turns up to this one, then goes live.
function markTurnEnds(messages, items) {
  const fork = stage.summary && stage.summary.fork;
  if (!fork) return;
  const last = new Map();
  messages.forEach((m, index) => m.turn && last.set(m.turn, index));
  for (const [turn, index] of last) items[index].append(forkControl(turn, fork));
}

function forkControl(turn, fork) {
  const point = `${stage.session}:${turn}`;
  const box = el("details", { class: "fork", "data-turn": turn });
  box.append(el("summary", { text: `turn ${turn} · fork here` }));
  if (!fork.commands.length) {
    box.append(el("p", { class: "meta", text: `No fork from here: ${fork.missing}.` }));
    return box;
  }
  box.append(el("p", { class: "meta", text: `A new session replaying turns 1–${turn} of session ${stage.session}, then live:` }));
  for (const command of fork.commands) {
    const line = `${command} --fork ${point}`;
    const copy = el("button", { type: "button", text: "copy" });
    copy.addEventListener("click", () => copyText(line, copy));
    box.append(el("div", { class: "command" }, el("code", { text: line }), copy));
  }
  return box;
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "copied";
  } catch {
    button.textContent = "select and copy";
  }
}

// A reply's private reasoning (§13.1), folded under it: only the director's view has it.
function reasoningFold(text) {
  return el(
    "details",
    { class: "reasoning" },
    el("summary", { text: `reasoning, private to the model (${text.length} characters)` }),
    el("div", { class: "text", text })
  );
}

// ------------------------------------------------------------------ flow picture

async function drawFlow(chart) {
  const target = document.getElementById("flow");
  stage.nodes.clear();
  document.querySelector("#flow-bar .zoom").hidden = !chart.mermaid;
  if (!chart.mermaid) {
    target.replaceChildren(el("p", { class: "meta", text: `No flow picture: ${chart.missing}.` }));
    return;
  }
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict", flowchart: { htmlLabels: false, useMaxWidth: false } });
  const { svg } = await mermaid.render("flow-svg", chart.mermaid);
  target.innerHTML = svg;
  showWhole(target.querySelector("svg"));
  const known = new Set(chart.nodes);
  for (const group of target.querySelectorAll("g.node")) {
    const match = /flowchart-(.+)-\d+$/.exec(group.id);
    if (match && known.has(match[1])) stage.nodes.set(match[1], group);
  }
  markRunning();
}

// The picture is zoomed and moved by changing the svg's viewBox (the part of the drawing in
// view): it starts fitted to the panel, whatever the chart's size.
const ZOOM_STEP = 1.25;
const ZOOM_RANGE = [0.25, 12]; // how far from the fitted size one may zoom out and in
const flowView = { svg: null, whole: null, view: null };

function showWhole(svg) {
  svg.removeAttribute("style"); // Mermaid's max-width: the panel decides the size
  svg.setAttribute("width", "100%");
  svg.setAttribute("height", "100%");
  svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
  const box = svg.viewBox.baseVal;
  flowView.svg = svg;
  flowView.whole = { x: box.x, y: box.y, width: box.width, height: box.height };
  fitFlow();
}

function fitFlow() {
  if (!flowView.svg) return;
  setView({ ...flowView.whole });
}

function setView(view) {
  flowView.view = view;
  flowView.svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.width} ${view.height}`);
  flowView.svg.dataset.zoom = zoomLevel().toFixed(3);
}

// How much bigger than fitted the picture is drawn (1: the whole flow fits the panel).
function zoomLevel() {
  return flowView.whole.width / flowView.view.width;
}

// Zoom by `factor` keeping the drawing's point under (clientX, clientY) where it is.
function zoomFlow(factor, clientX, clientY) {
  if (!flowView.svg) return;
  const level = Math.min(ZOOM_RANGE[1], Math.max(ZOOM_RANGE[0], zoomLevel() * factor));
  const applied = level / zoomLevel();
  const frame = flowView.svg.getBoundingClientRect();
  const at = toDrawing(clientX ?? frame.left + frame.width / 2, clientY ?? frame.top + frame.height / 2);
  const view = flowView.view;
  setView({
    x: at.x - (at.x - view.x) / applied,
    y: at.y - (at.y - view.y) / applied,
    width: view.width / applied,
    height: view.height / applied,
  });
}

function toDrawing(clientX, clientY) {
  const point = new DOMPoint(clientX, clientY).matrixTransform(flowView.svg.getScreenCTM().inverse());
  return { x: point.x, y: point.y };
}

// Move the view by (dx, dy) screen pixels.
function panFlow(dx, dy) {
  const scale = flowView.svg.getScreenCTM().a; // screen pixels per drawing unit
  const view = flowView.view;
  setView({ ...view, x: view.x - dx / scale, y: view.y - dy / scale });
}

function listenToFlowControls() {
  const flow = document.getElementById("flow");
  document.getElementById("zoom-in").addEventListener("click", () => zoomFlow(ZOOM_STEP));
  document.getElementById("zoom-out").addEventListener("click", () => zoomFlow(1 / ZOOM_STEP));
  document.getElementById("zoom-fit").addEventListener("click", fitFlow);
  flow.addEventListener(
    "wheel",
    (event) => {
      if (!flowView.svg) return;
      event.preventDefault();
      zoomFlow(Math.exp(-event.deltaY * 0.0015), event.clientX, event.clientY);
    },
    { passive: false }
  );
  let dragged = null;
  flow.addEventListener("pointerdown", (event) => {
    if (!flowView.svg || event.button !== 0) return;
    dragged = { x: event.clientX, y: event.clientY };
    flow.setPointerCapture(event.pointerId);
    flow.classList.add("dragging");
  });
  flow.addEventListener("pointermove", (event) => {
    if (!dragged) return;
    panFlow(event.clientX - dragged.x, event.clientY - dragged.y);
    dragged = { x: event.clientX, y: event.clientY };
  });
  const drop = () => {
    dragged = null;
    flow.classList.remove("dragging");
  };
  flow.addEventListener("pointerup", drop);
  flow.addEventListener("pointercancel", drop);
}

// A node that starts running out of view is brought to the middle, at the same zoom.
function bringIntoView(group) {
  const node = group.getBoundingClientRect();
  const frame = flowView.svg.getBoundingClientRect();
  const inside =
    node.left >= frame.left && node.right <= frame.right && node.top >= frame.top && node.bottom <= frame.bottom;
  if (inside) return;
  panFlow(frame.left + frame.width / 2 - (node.left + node.width / 2), frame.top + frame.height / 2 - (node.top + node.height / 2));
}

function markRunning() {
  const running = stage.state ? stage.state.running : [];
  const ids = new Set(running.map((r) => r.id).filter(Boolean));
  for (const [id, group] of stage.nodes) {
    const was = group.classList.contains("running");
    group.classList.toggle("running", ids.has(id));
    if (!was && ids.has(id)) bringIntoView(group);
  }
  const names = [...new Set(running.map((r) => r.node))];
  document.getElementById("running").textContent = names.length ? `running: ${names.join(", ")}` : "";
}

// ------------------------------------------------------------------ status and human turns

function showStatus() {
  const state = stage.state;
  const badge = document.getElementById("status");
  if (!state) return;
  let status = state.status === "archive" ? (stage.summary && stage.summary.status) || "stored" : state.status;
  if (state.waiting.length) status = `waiting for ${state.waiting.map((w) => w.actor).join(", ")}`;
  badge.textContent = status;
  badge.className = `status ${state.waiting.length ? "waiting" : status}`;
  badge.title = state.error || "";
}

function showWaiting(waiting) {
  const box = document.getElementById("waiting");
  const ids = new Set(waiting.map((w) => String(w.id)));
  for (const form of [...box.children]) if (!ids.has(form.dataset.turn)) form.remove();
  for (const turn of waiting) {
    if (box.querySelector(`form[data-turn="${turn.id}"]`)) continue;
    box.append(answerForm(turn));
  }
}

function answerForm(turn) {
  const form = el("form", { class: "human-turn", "data-turn": turn.id, "data-actor": turn.actor });
  const who = turn.role ? `${turn.actor} as ${turn.role}` : turn.actor;
  form.append(el("h3", { text: `${who}: your turn (${turn.action})` }));
  if (turn.context) {
    form.append(el("details", {}, el("summary", { text: "what you see so far" }), el("pre", { text: turn.context })));
  }
  form.append(el("div", { class: "prompt", text: turn.prompt }));
  form.append(el("textarea", { name: "text", "aria-label": "your words", placeholder: "what you say" }));
  for (const out of turn.outs) {
    let field;
    if (out.menu) {
      field = el("select", { "data-out": out.label });
      field.append(el("option", { value: "", text: out.optional ? "(no answer)" : "choose…" }));
      out.menu.forEach((choice, index) => field.append(el("option", { value: String(index), text: choice })));
    } else {
      field = el("input", { "data-out": out.label, type: "text" });
    }
    form.append(el("label", {}, `${out.name}: `, field));
  }
  const problem = el("p", { class: "problem" });
  form.append(el("button", { type: "submit", text: "Answer" }), problem);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const outs = {};
    for (const field of form.querySelectorAll("[data-out]")) outs[field.dataset.out] = field.value;
    const text = form.querySelector("textarea").value;
    try {
      await api("/api/answer", { method: "POST", body: JSON.stringify({ id: turn.id, text, outs }) });
      form.remove();
    } catch (error) {
      problem.textContent = error.message;
    }
  });
  return form;
}

// ------------------------------------------------------------------ live updates

// One event stream per perspective: the replies being written depend on who is watching.
function listen() {
  if (stage.events) stage.events.close();
  const query = `token=${encodeURIComponent(token)}&seat=${encodeURIComponent(stage.seat)}`;
  const events = new EventSource(`/api/events?${query}`);
  stage.events = events;
  events.onmessage = (event) => onState(JSON.parse(event.data)).catch(lostContact);
  events.onerror = () => {
    if (events === stage.events) lostContact(new Error("the stage is not answering (has the run stopped?)"));
  };
}

async function onState(state) {
  const ended = stage.state && stage.state.status !== state.status;
  stage.state = state;
  if (stage.session === null) {
    // one look at a time: two draws of the flow at once would clash in Mermaid
    stage.choosing = stage.choosing || chooseSession().finally(() => (stage.choosing = null));
    await stage.choosing;
  }
  if (ended && stage.session !== null) stage.summary = await api(`/api/sessions/${stage.session}`);
  showStatus();
  markRunning();
  showWaiting(state.waiting);
  if (state.messages !== stage.shownCount || ended) {
    stage.shownCount = state.messages;
    refreshDialog(); // shows the replies being written once the stored ones are in
  } else if (!stage.loading) {
    showWriting();
  }
}

// The server went away (Ctrl+C) or refused a read: say so instead of failing silently.
function lostContact(error) {
  const badge = document.getElementById("status");
  badge.textContent = "disconnected";
  badge.className = "status failed";
  badge.title = error.message;
}

document.getElementById("seat").addEventListener("change", (event) => {
  stage.seat = event.target.value;
  listen();
  refreshDialog();
});

listenToFlowControls();

(async () => {
  if (stage.session !== null) await openSession(stage.session);
  else await chooseSession();
  listen();
})().catch(lostContact);
