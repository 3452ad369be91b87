// Ferry console page. Every value from the server is put in the page as
// text (textContent, text nodes, attribute values): never as HTML.
"use strict";

const state = {
  session: null,
  groups: [],
  dlqGroup: "",
  letters: [],
  selected: new Set(),
  detailId: "",
  busy: false,
};

const $ = (id) => document.getElementById(id);

// el builds an element; string children become text nodes.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function fmtNum(n, digits) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toFixed(digits || 0);
}

function fmtAge(sec) {
  if (sec === null || sec === undefined || sec < 0) return "–";
  if (sec < 60) return sec.toFixed(0) + " s";
  if (sec < 3600) return (sec / 60).toFixed(1) + " min";
  if (sec < 86400) return (sec / 3600).toFixed(1) + " h";
  return (sec / 86400).toFixed(1) + " d";
}

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  const body = await r.json().catch(() => ({ error: "bad answer from the console (" + r.status + ")" }));
  if (!r.ok) throw new Error(body.error || String(r.status));
  return body;
}

async function postJSON(path, payload) {
  const headers = { "Content-Type": "application/json", "X-Ferry-CSRF": state.session.csrf };
  const token = $("token").value;
  if (token) headers["X-Ferry-Token"] = token;
  const r = await fetch(path, {
    method: "POST", credentials: "same-origin", cache: "no-store",
    headers, body: JSON.stringify(payload),
  });
  const body = await r.json().catch(() => ({ error: "bad answer from the console (" + r.status + ")" }));
  if (!r.ok) throw new Error(body.error || String(r.status));
  return body;
}

function banner(msg) {
  const b = $("banner");
  b.textContent = msg || "";
  b.hidden = !msg;
}

// confirmAction shows the confirmation dialog and resolves to the entered
// fields, or null when cancelled.
function confirmAction(text, opts) {
  opts = opts || {};
  const d = $("confirm");
  $("confirm-text").textContent = text;
  $("confirm-reason-box").hidden = !opts.reason;
  $("confirm-by-box").hidden = !opts.by;
  $("confirm-reason").value = "";
  d.returnValue = "";
  return new Promise((resolve) => {
    d.addEventListener("close", () => {
      if (d.returnValue !== "ok") return resolve(null);
      resolve({ reason: $("confirm-reason").value, by: $("confirm-by").value });
    }, { once: true });
    d.showModal();
  });
}

// ---- charts: one SVG polyline per series, drawn here ----

const SVG = "http://www.w3.org/2000/svg";

function chart(points, field, cls, label, field2, cls2, countsRate) {
  const w = 180, h = 40, pad = 2;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  const pts = points.filter((p) => typeof p[field] === "number" && !p.err);
  const title = document.createElementNS(SVG, "title");
  title.textContent = label;
  svg.append(title);
  if (pts.length === 0) {
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", 4);
    t.setAttribute("y", h / 2 + 3);
    t.textContent = field === "rate" && !countsRate ? "the broker counts no consumed messages" : "no data yet";
    svg.append(t);
    return svg;
  }
  const t0 = pts[0].t, t1 = Math.max(pts[pts.length - 1].t, t0 + 1);
  const top = Math.max(1, ...pts.map((p) => p[field]));
  const coords = pts.map((p) => {
    const x = pad + ((p.t - t0) / (t1 - t0)) * (w - 2 * pad);
    const y = h - pad - (p[field] / top) * (h - 2 * pad - 10);
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  if (coords.length === 1) coords.push((w - pad) + "," + coords[0].split(",")[1]);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("class", cls);
  line.setAttribute("points", coords.join(" "));
  svg.append(line);
  const max = document.createElementNS(SVG, "text");
  max.setAttribute("x", 3);
  max.setAttribute("y", 9);
  max.textContent = "max " + fmtNum(top, field === "rate" ? 1 : 0) + (field === "lag" ? " msg" : "/s");
  svg.append(max);
  if (field2) {
    // A second series on its own scale (the oldest message's age, in
    // seconds, beside the messages behind).
    const top2 = Math.max(1, ...pts.map((p) => p[field2]));
    const c2 = pts.map((p) => {
      const x = pad + ((p.t - t0) / (t1 - t0)) * (w - 2 * pad);
      const y = h - pad - (p[field2] / top2) * (h - 2 * pad - 10);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    if (c2.length === 1) c2.push((w - pad) + "," + c2[0].split(",")[1]);
    const l2 = document.createElementNS(SVG, "polyline");
    l2.setAttribute("class", cls2);
    l2.setAttribute("points", c2.join(" "));
    svg.append(l2);
    const m2 = document.createElementNS(SVG, "text");
    m2.setAttribute("x", w - 3);
    m2.setAttribute("y", 9);
    m2.setAttribute("text-anchor", "end");
    m2.setAttribute("class", cls2);
    m2.textContent = "max " + fmtNum(top2, 1) + " s";
    svg.append(m2);
  }
  return svg;
}

// ---- overview: groups, charts, semantics ----

function lastPoint(g) {
  for (let i = g.series.length - 1; i >= 0; i--) if (!g.series[i].err) return g.series[i];
  return null;
}

function lastRate(g) {
  for (let i = g.series.length - 1; i >= 0; i--) if (typeof g.series[i].rate === "number") return g.series[i].rate;
  return null;
}

// windowText is what g consumed in its i-th window (1 min, 5 min, all
// held), or why there is no count.
function windowText(g, i) {
  const w = (g.windows || [])[i];
  if (!g.measure.counts) return "not counted";
  if (!w || w.messages === null || w.messages === undefined) return "–";
  return String(w.messages);
}

function renderGroups() {
  const body = $("groups").tBodies[0];
  clear(body);
  for (const g of state.groups) {
    const p = lastPoint(g);
    const dlqBtn = el("button", {
      type: "button", class: "show-dlq", text: "Dead letters",
      onclick: () => { selectDLQGroup(g.name); },
    });
    const row = el("tr", { "data-group": g.name },
      el("td", {}, g.name, g.error ? el("div", { class: "error", text: g.error }) : null),
      el("td", { text: g.topic }),
      el("td", { text: g.group }),
      el("td", { class: "num lag", text: p && typeof p.lag === "number" ? fmtNum(p.lag) : "–" }),
      el("td", { class: "num", text: p ? fmtNum(p.age, 1) : "–" }),
      el("td", { class: "num rate", text: g.measure.counts ? fmtNum(lastRate(g), 1) : "not counted" }),
      el("td", { class: "num consumed-1m", text: windowText(g, 0) }),
      el("td", { class: "num consumed-5m", text: windowText(g, 1) }),
      el("td", {}, chart(g.series, "lag", "lag", "messages behind (red) and age of the oldest in seconds (orange), last " +
        fmtAge(state.session.historySeconds), "age", "age")),
      el("td", {}, chart(g.series, "rate", "rate", "messages consumed per second: " + g.measure.throughput,
        null, null, g.measure.counts)),
      el("td", {}, dlqBtn),
    );
    body.append(row);
  }
  // Per group, what its lag and throughput are on this broker, and what
  // the broker cannot tell.
  const dl = $("measures");
  clear(dl);
  for (const g of state.groups) {
    dl.append(el("dt", { text: g.name }),
      el("dd", { class: "measure-lag", "data-group": g.name, text: "Lag: " + (g.measure.lag || "–") }),
      el("dd", { class: "measure-throughput", "data-group": g.name, text: "Throughput: " + (g.measure.throughput || "–") }));
  }
  const sel = $("dlq-select");
  const names = state.groups.map((g) => g.name);
  if ([...sel.options].map((o) => o.value).join("\n") !== names.join("\n")) {
    clear(sel);
    for (const n of names) sel.append(el("option", { value: n, text: n }));
    if (!state.dlqGroup && names.length) selectDLQGroup(names[0]);
    else sel.value = state.dlqGroup;
  }
}

const semanticsRows = [
  ["transport", "Transport"], ["ordering", "Ordering"], ["orderingHint", "How to keep order"],
  ["ack", "Ack"], ["redelivery", "Redelivery"], ["nackDelay", "Nack with delay"],
  ["attempts", "Broker's attempt count"], ["extend", "Lease extension"], ["nativeDLQ", "Native DLQ"],
  ["fanOut", "Fan-out per group"], ["replay", "Replay from oldest"], ["headers", "Headers"],
  ["maxPayload", "Max payload (bytes)"], ["redeliveryDelay", "Redelivery delay"],
];

function renderSemantics() {
  const groups = state.groups.filter((g) => g.semantics);
  const head = $("semantics").tHead.rows[0];
  clear(head);
  head.append(el("th", { text: "Field" }));
  for (const g of groups) head.append(el("th", { text: g.name }));
  const body = $("semantics").tBodies[0];
  clear(body);
  for (const [field, label] of semanticsRows) {
    const row = el("tr", {}, el("td", { text: label }));
    for (const g of groups) {
      let v = g.semantics[field];
      if (typeof v === "boolean") v = v ? "yes" : "no";
      if (field === "maxPayload" && v === 0) v = "no known limit";
      row.append(el("td", { text: v === undefined || v === "" ? "–" : String(v) }));
    }
    body.append(row);
  }
}

async function refreshOverview() {
  try {
    const o = await getJSON("api/overview");
    state.groups = o.groups;
    banner(o.error);
    renderGroups();
    renderSemantics();
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    banner("overview: " + e.message);
  }
}

// ---- dead letters ----

function selectDLQGroup(name) {
  state.dlqGroup = name;
  state.selected.clear();
  state.detailId = "";
  $("dlq-select").value = name;
  refreshDLQ();
}

function dlqResult(msg, isError) {
  const r = $("dlq-result");
  r.textContent = msg;
  r.className = "result" + (isError ? " error" : "");
}

async function refreshDLQ() {
  if (!state.session.deadLetters) {
    $("dlq-empty").hidden = false;
    $("dlq-empty").textContent = "This transport has no DLQ operations.";
    return;
  }
  if (!state.dlqGroup) return;
  try {
    const d = await getJSON("api/dlq?group=" + encodeURIComponent(state.dlqGroup));
    state.letters = d.letters;
    $("dlq-group").textContent = "of " + d.group + " (" + d.dlq + ")";
    renderDLQ();
  } catch (e) {
    dlqResult("list: " + e.message, true);
  }
}

function renderDLQ() {
  const body = $("dlq").tBodies[0];
  clear(body);
  const ids = new Set(state.letters.map((l) => l.id));
  for (const id of [...state.selected]) if (!ids.has(id)) state.selected.delete(id);
  for (const l of state.letters) {
    const box = el("input", {
      type: "checkbox", checked: state.selected.has(l.id),
      onchange: (ev) => { ev.target.checked ? state.selected.add(l.id) : state.selected.delete(l.id); updateSelected(); },
    });
    const row = el("tr", { "data-id": l.id, class: l.id === state.detailId ? "selected" : "" },
      el("td", {}, box),
      el("td", {}, el("a", { href: "#", class: "show", text: l.id, onclick: (ev) => { ev.preventDefault(); showDetail(l); } })),
      el("td", { class: "key", text: l.key }),
      el("td", { class: "reason", text: l.reason }),
      el("td", { text: l.class }),
      el("td", { class: "num", text: String(l.attempts) }),
      el("td", { class: "first-failure", text: l.firstFailure || "–" }),
      el("td", { class: "num", text: fmtAge(l.age) }),
      el("td", {},
        el("button", { type: "button", class: "replay", text: "Replay", onclick: () => replay({ ids: [l.id] }, "message " + l.id) }),
        " ",
        l.key ? el("button", { type: "button", class: "replay-key", text: "Replay key", onclick: () => replay({ keys: [l.key] }, "every dead letter of key " + l.key) }) : null,
      ),
    );
    body.append(row);
  }
  $("dlq-empty").hidden = state.letters.length > 0;
  updateSelected();
  if (state.detailId && !ids.has(state.detailId)) $("dlq-detail").hidden = true;
}

function updateSelected() {
  const n = state.selected.size;
  const b = $("dlq-replay-selected");
  b.disabled = n === 0 || !state.session.writable;
  b.textContent = n ? "Replay selected (" + n + ")" : "Replay selected";
}

// rangeTime reads a time box: "" when empty, else the time as RFC 3339
// (UTC), or an Error naming the box.
function rangeTime(id, label) {
  const v = $(id).value.trim();
  if (!v) return "";
  const t = new Date(v);
  if (Number.isNaN(t.getTime())) throw new Error(label + " " + JSON.stringify(v) + " is not a time (try 2026-12-01T08:00:00Z)");
  return t.toISOString();
}

// replayRange replays the dead letters that first failed in the range of
// the two time boxes; the confirmation says how many of those listed lie
// in it, and the result how many the server replayed.
function replayRange() {
  let since, until;
  try {
    since = rangeTime("dlq-since", "from");
    until = rangeTime("dlq-until", "until");
  } catch (e) {
    dlqResult(e.message, true);
    return;
  }
  if (!since && !until) { dlqResult("give a time range: from, until or both", true); return; }
  const inRange = state.letters.filter((l) => l.firstFailure &&
    (!since || Date.parse(l.firstFailure) >= Date.parse(since)) && (!until || Date.parse(l.firstFailure) < Date.parse(until)));
  const what = "the dead letters that first failed " + (since ? "from " + since + " " : "") + (until ? "until " + until : "until now") +
    " (" + inRange.length + " of those listed)";
  replay({ since, until }, what);
}

function showDetail(l) {
  state.detailId = l.id;
  $("detail-id").textContent = l.id;
  const body = $("detail-headers").tBodies[0];
  clear(body);
  for (const [k, v] of l.headers) body.append(el("tr", {}, el("td", { text: k }), el("td", { text: v })));
  $("detail-encoding").textContent = l.encoding === "text"
    ? "(" + l.size + " bytes, text)" : "(" + l.size + " bytes, binary: base64)";
  $("detail-payload").textContent = l.payload;
  $("dlq-detail").hidden = false;
  for (const tr of $("dlq").tBodies[0].rows) tr.className = tr.getAttribute("data-id") === l.id ? "selected" : "";
}

async function replay(sel, what) {
  const ok = await confirmAction("Replay " + what + " of " + state.dlqGroup +
    " to its original topic? Replay is at-least-once: a consumer that dedupes applies each message once.");
  if (!ok) { dlqResult("replay cancelled"); return; }
  dlqResult("replaying…");
  try {
    const r = await postJSON("api/dlq/replay", Object.assign({ group: state.dlqGroup }, sel));
    dlqResult("Replayed " + r.replayed + " message" + (r.replayed === 1 ? "" : "s") + ".");
    for (const id of sel.ids || []) state.selected.delete(id);
  } catch (e) {
    dlqResult("replay refused: " + e.message, true);
  }
  refreshDLQ();
}

// ---- parked keys ----

function parkedResult(msg, isError) {
  const r = $("parked-result");
  r.textContent = msg;
  r.className = "result" + (isError ? " error" : "");
}

async function refreshParked() {
  if (!state.session.parking) {
    $("parked-empty").hidden = false;
    $("parked-empty").textContent = "No parking lot: start the console with --parking.";
    return;
  }
  try {
    renderParked(await getJSON("api/parked"));
  } catch (e) {
    parkedResult("list: " + e.message, true);
  }
}

function renderParked(d) {
  const body = $("parked").tBodies[0];
  clear(body);
  for (const k of d.keys) {
    let state_ = "parked";
    if (k.releasing) state_ = "releasing";
    else if (k.requestedBy) state_ = "release requested by " + k.requestedBy + " " + fmtAge(k.requestedAge) + " ago";
    else if (k.failedReleases) state_ = "release failed " + k.failedReleases + "×: " + k.lastFailure;
    body.append(el("tr", { "data-sub": k.subscription, "data-key": k.key },
      el("td", { text: k.subscription }),
      el("td", { class: "key", text: k.key }),
      el("td", { class: "num count", text: String(k.count) }),
      el("td", { class: "num", text: fmtAge(k.age) }),
      el("td", { class: "reason", text: k.reason }),
      el("td", { text: state_ }),
      el("td", {},
        el("button", { type: "button", class: "messages", text: "Messages", onclick: () => showParked(k) }),
        " ",
        el("button", { type: "button", class: "release", text: "Release", onclick: () => release(k) }),
        " ",
        el("button", { type: "button", class: "drop danger", text: "Drop", onclick: () => drop(k) }),
      ),
    ));
  }
  $("parked-empty").hidden = d.keys.length > 0;
  // Per subscription: how many keys are parked and since when the oldest.
  const subs = new Map();
  for (const k of d.keys) {
    const v = subs.get(k.subscription) || { keys: 0, messages: 0, oldest: 0 };
    v.keys++;
    v.messages += k.count;
    v.oldest = Math.max(v.oldest, k.age);
    subs.set(k.subscription, v);
  }
  const summary = $("parked-summary");
  clear(summary);
  for (const [sub, v] of subs) {
    summary.append(el("li", { "data-sub": sub }, el("strong", { text: sub }),
      ": " + v.keys + " key" + (v.keys === 1 ? "" : "s") + " parked (" + v.messages + " message" +
      (v.messages === 1 ? "" : "s") + "), the oldest for " + fmtAge(v.oldest)));
  }
  const audits = $("audits").tBodies[0];
  clear(audits);
  for (const a of d.audits) {
    audits.append(el("tr", {},
      el("td", { text: a.droppedAt }), el("td", { text: a.subscription }), el("td", { text: a.key }),
      el("td", { text: (a.ids || []).length + ": " + (a.ids || []).join(", ") }),
      el("td", { text: a.by }), el("td", { text: a.reason })));
  }
  if (d.error) parkedResult("audits: " + d.error, true);
}

async function showParked(k) {
  try {
    const d = await getJSON("api/parked/messages?subscription=" + encodeURIComponent(k.subscription) +
      "&key=" + encodeURIComponent(k.key));
    $("parked-key").textContent = k.key + " of " + k.subscription;
    const body = $("parked-messages").tBodies[0];
    clear(body);
    for (const m of d.messages) {
      body.append(el("tr", { "data-id": m.id },
        el("td", { class: "num", text: String(m.seq) }),
        el("td", { text: m.id }),
        el("td", { text: m.parkedAt }),
        el("td", {}, el("pre", { text: m.encoding === "text" ? m.payload : "base64: " + m.payload }))));
    }
    $("parked-detail").hidden = false;
  } catch (e) {
    parkedResult("messages: " + e.message, true);
  }
}

async function release(k) {
  const ok = await confirmAction("Release key " + k.key + " of " + k.subscription + "? The running consumers replay its " +
    k.count + " parked message(s) in order through the subscription's handler, then unpark it.", { by: true });
  if (!ok) { parkedResult("release cancelled"); return; }
  try {
    const r = await postJSON("api/parked/release", { subscription: k.subscription, key: k.key, by: ok.by });
    parkedResult("Release of " + k.key + " requested by " + r.by + ": " + r.state + ", " + r.left +
      " message(s) left; the running consumers replay them in order.");
  } catch (e) {
    parkedResult("release refused: " + e.message, true);
  }
  refreshParked();
}

async function drop(k) {
  const ok = await confirmAction("Drop key " + k.key + " of " + k.subscription + "? Its " + k.count +
    " parked message(s) are discarded without being handled; the audit record keeps their IDs, your name and the reason.", { reason: true, by: true });
  if (!ok) { parkedResult("drop cancelled"); return; }
  try {
    const r = await postJSON("api/parked/drop", { subscription: k.subscription, key: k.key, reason: ok.reason, by: ok.by });
    parkedResult("Dropped " + r.dropped + " message(s) of " + k.key + " (audit: " + r.by + ", " + r.reason + ").");
  } catch (e) {
    parkedResult("drop refused: " + e.message, true);
  }
  refreshParked();
}

// ---- dedupe inbox ----

function inboxResult(id, msg, isError) {
  const r = $(id);
  r.textContent = msg;
  r.className = "result" + (isError ? " error" : "");
}

async function refreshInbox() {
  if (!state.session.inbox) {
    $("inbox-empty").hidden = false;
    $("inbox-empty").textContent = "No inbox: start the console with --inbox.";
    $("inbox-body").hidden = true;
    $("inbox-refresh").hidden = true;
    return;
  }
  let d;
  try {
    d = await getJSON("api/inbox");
  } catch (e) {
    inboxResult("inbox-result", "inbox: " + e.message, true);
    return;
  }
  const body = $("inbox").tBodies[0];
  clear(body);
  const names = $("inbox-namespaces");
  clear(names);
  for (const n of d.namespaces) {
    body.append(el("tr", { "data-ns": n.namespace },
      el("td", { text: n.namespace === "" ? "(default)" : n.namespace }),
      el("td", { class: "num done", text: String(n.done) }),
      el("td", { class: "num done-recent", text: String(n.done_recent) }),
      el("td", { class: "num in-progress", text: String(n.in_progress) }),
      el("td", { class: "num", text: n.in_progress ? fmtAge(n.oldest_in_progress) : "–" }),
      el("td", { class: "num abandoned", text: String(n.abandoned) })));
    names.append(el("option", { value: n.namespace }));
  }
  const stuck = $("inbox-stuck").tBodies[0];
  clear(stuck);
  for (const c of d.stuck) {
    stuck.append(el("tr", { "data-id": c.id },
      el("td", { text: c.namespace }), el("td", { text: c.id }), el("td", { text: c.claimed_at }),
      el("td", { class: "num", text: fmtAge(c.age) }),
      el("td", { text: c.lease_left < 0 ? "ended " + fmtAge(-c.lease_left) + " ago: abandoned" : fmtAge(c.lease_left) + " left" })));
  }
  $("inbox-empty").hidden = d.namespaces.length > 0;
  $("inbox-empty").textContent = "The inbox holds no record.";
}

const inboxStates = {
  "done": "processed: a duplicate is skipped",
  "in-progress": "being processed now (claimed, lease running)",
  "abandoned": "claimed, but its lease ended unsettled: it will be processed again",
  "expired": "processed, but remembered no longer: a duplicate would be processed again",
  "unknown": "no record: never processed, released after a failure, or cleaned up",
};

async function lookupInbox() {
  const id = $("inbox-id").value.trim();
  const ns = $("inbox-ns").value;
  if (!id) { inboxResult("inbox-answer", "give a message ID", true); return; }
  try {
    const r = await getJSON("api/inbox/lookup?namespace=" + encodeURIComponent(ns) + "&id=" + encodeURIComponent(id));
    let msg = r.id + ": " + r.state + " (" + inboxStates[r.state] + ")";
    if (r.claimed_at) msg += ", claimed at " + r.claimed_at;
    const answer = $("inbox-answer");
    answer.setAttribute("data-state", r.state);
    inboxResult("inbox-answer", msg);
  } catch (e) {
    inboxResult("inbox-answer", "look up: " + e.message, true);
  }
}

// ---- start ----

async function start() {
  try {
    state.session = await getJSON("api/session");
  } catch (e) {
    banner("session: " + e.message);
    return;
  }
  const s = state.session;
  $("broker").textContent = s.url;
  const mode = $("mode");
  if (!s.writable) {
    mode.textContent = "read-only (listening beyond loopback without a token)";
    mode.className = "badge ro";
  } else {
    mode.textContent = s.needsToken ? "writes need the operator token" : "loopback: writes allowed";
    mode.className = "badge";
  }
  $("token-box").hidden = !s.needsToken;
  $("dlq-select").addEventListener("change", (ev) => selectDLQGroup(ev.target.value));
  $("dlq-refresh").addEventListener("click", refreshDLQ);
  $("parked-refresh").addEventListener("click", refreshParked);
  $("dlq-all").addEventListener("change", (ev) => {
    state.selected.clear();
    if (ev.target.checked) for (const l of state.letters) state.selected.add(l.id);
    renderDLQ();
  });
  $("dlq-replay-range").addEventListener("click", replayRange);
  $("dlq-replay-range").disabled = !s.writable;
  $("dlq-replay-selected").addEventListener("click", () => {
    const ids = [...state.selected];
    if (ids.length) replay({ ids }, ids.length + " selected message(s)");
  });
  $("inbox-refresh").addEventListener("click", refreshInbox);
  $("inbox-lookup").addEventListener("click", lookupInbox);
  await refreshOverview();
  refreshParked();
  refreshInbox();
  setInterval(refreshInbox, 15000);
  setInterval(refreshOverview, Math.max(500, s.intervalMs));
  setInterval(() => { if (!$("confirm").open) { refreshDLQ(); refreshParked(); } }, 5000);
}

start();
