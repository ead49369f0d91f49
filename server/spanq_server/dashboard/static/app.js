// spanq's dashboard: a hash-routed page over the server's JSON API (/api/...).
// Everything shown is built with textContent: a payload is data, never markup.
"use strict";

const REFRESH_MS = 2000;
const ALARM_WINDOW_MS = 60000;  // a dead-letter count higher than it was within this long
const TOKEN_KEY = "spanq-token";
const history = new Map();  // queue -> [{t, age, dead}], for the red mark
let timer = null;
let generation = 0;  // a page's refreshes stop when another page is shown

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function showError(text) {
  const box = document.getElementById("error");
  box.textContent = text || "";
  box.hidden = !text;
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, Object.assign({}, options, {headers, cache: "no-store"}));
  if (response.status === 401) {
    document.getElementById("token-form").hidden = false;
  }
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).error || message; } catch (e) { /* not JSON */ }
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return response;
}

async function getJSON(path) { return (await api(path)).json(); }

function seconds(duration) { return duration ? parseFloat(duration) : 0; }
function age(s) { return s < 60 ? s.toFixed(1) + " s" : s < 3600 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(1) + " h"; }
function rate(r) { return (r || 0).toFixed(2) + "/s"; }

function spark(sent, acked) {
  const w = 120, h = 24;
  const top = Math.max(1e-9, ...sent, ...acked);
  const line = (series) => series.map((v, i) => `${(i * w / Math.max(1, series.length - 1)).toFixed(1)},${(h - 1 - v / top * (h - 2)).toFixed(1)}`).join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", w); svg.setAttribute("height", h);
  for (const [cls, series] of [["sent", sent], ["acked", acked]]) {
    const p = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    p.setAttribute("class", cls); p.setAttribute("points", line(series));
    svg.append(p);
  }
  return svg;
}

// Red when the oldest ready message keeps ageing (grew over the last three reads: nobody
// takes it) or the dead-letter count rose within the last minute.
function alarm(q) {
  const now = Date.now();
  const seen = (history.get(q.name) || []).filter(s => now - s.t < ALARM_WINDOW_MS);
  seen.push({t: now, age: seconds(q.oldest_ready_age), dead: Number(q.dead_lettered)});
  history.set(q.name, seen);
  const last = seen.slice(-3);
  const ageing = last.length === 3 && last[0].age > 0 && last[0].age < last[1].age && last[1].age < last[2].age;
  const dying = seen.some(s => s.dead < seen[seen.length - 1].dead);
  return ageing || dying;
}

// -- pages ---------------------------------------------------------------------------

async function queuesPage(page) {
  const data = await getJSON("/api/queues");
  const rows = data.queues.map(q => el("tr", {"data-queue": q.name, class: alarm(q) ? "alarm" : null},
    el("td", {class: "name"}, el("a", {href: "#/queue/" + encodeURIComponent(q.name)}, q.name)),
    el("td", {class: "ready"}, q.ready), el("td", {class: "scheduled"}, q.scheduled),
    el("td", {class: "leased"}, q.leased), el("td", {class: "dead_lettered"}, q.dead_lettered),
    el("td", {class: "oldest_ready_age"}, age(seconds(q.oldest_ready_age))),
    el("td", {class: "send_rate"}, rate(q.send_rate)), el("td", {class: "ack_rate"}, rate(q.ack_rate)),
    el("td", {class: "chart", title: `sent (blue) and acked (green) per second, ${data.rate_step} s a point, last 5 minutes`},
       spark(q.sent_series, q.acked_series))));
  page.replaceChildren(
    el("h1", {}, "Queues"),
    el("table", {id: "queues"},
      el("thead", {}, el("tr", {}, ["Queue", "Ready", "Scheduled", "In flight", "Dead-lettered", "Oldest ready",
        "Sent", "Acked", "Last 5 min"].map((t, i) => el("th", {class: i ? null : "name"}, t)))),
      el("tbody", {}, rows)),
    data.queues.length ? null : el("p", {class: "muted"}, "No queues to show."),
    data.denied.length ? el("p", {class: "muted", id: "denied"},
      "Not shown (this token lacks the select privilege): " + data.denied.join(", ")) : null);
}

function payloadText(value, type) {
  if (value === null || value === undefined) return "";
  if (type === "JSON") return JSON.stringify(value, null, 2);
  if (type === "STRING") return value;
  const bytes = atob(value);  // BYTES arrive in base64
  return Array.from(bytes, c => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ");
}

function time(ts) { return ts ? ts.replace("T", " ").replace(/\.\d+Z$|Z$/, "Z") : ""; }

async function queuePage(page, name, state) {
  const path = "/api/queues/" + encodeURIComponent(name);
  const [info, peek] = await Promise.all([
    getJSON(path),
    getJSON(`${path}/messages?page_size=20&page_token=${encodeURIComponent(state.tokens[state.tokens.length - 1])}`)]);
  const q = info.queue, s = info.stats;
  const definition = [
    ["Keys", q.key_columns.map(c => `${c.name} ${c.type}`).join(", ")], ["Payload", q.payload_type],
    ["Lease", q.lease_duration], ["Backoff", `${q.initial_backoff} .. ${q.max_backoff}`],
    ["Max delivery attempts", q.max_delivery_attempts || "unlimited"], ["Dead-letter queue", q.dead_letter_queue || "none"],
    ["Parent", q.parent_table || "none"], ["Dead letters of", info.dead_letter_sources.join(", ") || "no queue"]];
  const messages = peek.messages.map(m => el("tr", {class: "message"},
    el("td", {class: "text key"}, JSON.stringify(m.key)),
    el("td", {class: "text"}, el("pre", {class: "payload"}, payloadText(m.payload, peek.payload_type))),
    el("td", {class: "state"}, m.state), el("td", {}, m.delivery_attempt),
    el("td", {}, time(m.enqueue_time)), el("td", {}, time(m.deliver_time)), el("td", {}, time(m.lease_expiration_time))));
  const actions = el("div", {class: "actions"},
    el("button", {id: "purge", disabled: !info.may_purge, title: info.may_purge ? null : "this token may not purge it",
      onclick: () => purge(name)}, "Purge"),
    info.dead_letter_sources.length ? el("button", {id: "redrive", disabled: !info.may_redrive,
      onclick: () => redrive(name, info.dead_letter_sources[0])}, `Redrive to ${info.dead_letter_sources[0]}`) : null,
    el("progress", {id: "redrive-progress", hidden: true, max: 1, value: 0}),
    el("span", {id: "action-result"}, state.result || ""));
  page.replaceChildren(
    el("h1", {}, "Queue ", el("span", {id: "queue-name"}, name)),
    el("dl", {class: "def"}, definition.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("p", {id: "queue-counts"}, `ready ${s.ready} · scheduled ${s.scheduled} · in flight ${s.leased} · ` +
      `dead-lettered ${s.dead_lettered} · oldest ready ${age(seconds(s.oldest_ready_age))}`),
    actions,
    el("h2", {}, "Messages, in delivery order"),
    el("table", {id: "messages"},
      el("thead", {}, el("tr", {}, ["Key", "Payload", "State", "Attempts", "Enqueued", "Deliver at", "Lease ends"]
        .map(t => el("th", {class: "name"}, t)))),
      el("tbody", {}, messages)),
    peek.messages.length ? null : el("p", {class: "muted", id: "no-messages"}, "No messages."),
    el("p", {},
      el("button", {id: "first-page", disabled: state.tokens.length === 1, onclick: () => { state.tokens = [""]; refresh(); }}, "First page"),
      el("button", {id: "next-page", disabled: !peek.next_page_token,
        onclick: () => { state.tokens.push(peek.next_page_token); refresh(); }}, "Next page")));
}

async function purge(name) {
  if (!confirm(`Purge every message of ${name}? This cannot be undone.`)) return;
  try {
    const result = await (await api(`/api/queues/${encodeURIComponent(name)}/purge`, {method: "POST", body: "{}"})).json();
    current.state.result = `Purged ${result.purged} message(s).`;
  } catch (e) { current.state.result = "Refused: " + e.message; }
  refresh();
}

async function redrive(name, to) {
  if (!confirm(`Move every dead letter of ${name} back to ${to}?`)) return;
  const bar = document.getElementById("redrive-progress");
  const result = document.getElementById("action-result");
  clearTimeout(timer);  // the page is not redrawn under the progress bar
  bar.hidden = false;
  try {
    const response = await api(`/api/queues/${encodeURIComponent(name)}/redrive`,
      {method: "POST", body: JSON.stringify({to})});
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "", last = null;
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += value;
      const lines = buffer.split("\n");
      buffer = lines.pop();
      for (const line of lines.filter(Boolean)) {
        last = JSON.parse(line);
        if (last.error) throw new Error(last.error);
        bar.max = last.moved + last.remaining || 1;
        bar.value = last.moved;
        result.textContent = `Moved ${last.moved}, ${last.remaining} left`;
      }
    }
    current.state.result = last ? `Redrive done: moved ${last.moved} to ${last.to}, ${last.remaining} left` +
      (last.skipped ? ` (${last.skipped} cannot move now)` : "") + "." : "";
  } catch (e) { current.state.result = "Refused: " + e.message; }
  refresh();
}

async function streamsPage(page) {
  const data = await getJSON("/api/streams");
  page.replaceChildren(
    el("h1", {}, "Streams"),
    el("p", {}, `${data.open_streams} Receive stream(s) open on this server.`),
    el("table", {id: "streams"},
      el("thead", {}, el("tr", {}, el("th", {class: "name"}, "Queue"), el("th", {}, "Open streams (this server)"),
        el("th", {}, "Leases in flight (all servers)"))),
      el("tbody", {}, data.queues.map(q => el("tr", {"data-queue": q.name},
        el("td", {class: "name"}, q.name), el("td", {class: "streams"}, q.streams), el("td", {class: "leased"}, q.leased))))));
}

// -- routing and live refresh --------------------------------------------------------

let current = null;

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const match = hash.match(/^\/queue\/(.+)$/);
  if (match) return {draw: queuePage, args: [decodeURIComponent(match[1])], state: {tokens: [""]}};
  if (hash === "/streams") return {draw: streamsPage, args: [], state: {}};
  return {draw: queuesPage, args: [], state: {}};
}

async function refresh() {
  clearTimeout(timer);
  const mine = ++generation;
  const page = document.getElementById("page");
  try {
    // A slow answer for a page no longer shown must not draw over the one that is.
    const sink = {replaceChildren: (...nodes) => { if (mine === generation) page.replaceChildren(...nodes.filter(n => n !== null)); }};
    await current.draw(sink, ...current.args, current.state);
    if (mine !== generation) return;
    page.dataset.loaded = String(Date.now());
    showError("");
  } catch (e) {
    if (mine !== generation) return;
    showError(e.status === 401 ? "Give a token to see this page." : e.message);
    if (e.status === 403 || e.status === 404) page.replaceChildren();
  }
  if (mine === generation) timer = setTimeout(refresh, REFRESH_MS);
}

function start() {
  const form = document.getElementById("token-form");
  const forget = document.getElementById("forget-token");
  forget.hidden = !sessionStorage.getItem(TOKEN_KEY);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    form.hidden = true;
    forget.hidden = false;
    refresh();
  });
  forget.addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); });
  window.addEventListener("hashchange", () => { current = route(); refresh(); });
  current = route();
  refresh();
}

start();
