// spanq's dashboard: a hash-routed page over the server's JSON API (/api/...).
// Everything shown is built with textContent: a payload is data, never markup.
"use strict";

const REFRESH_MS = 2000;
const TOKEN_KEY = "spanq-token";
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

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c);
  return node;
}

function spark(sent, acked) {
  const w = 120, h = 28;
  const top = Math.max(1e-9, ...sent, ...acked);
  const line = (series) => series.map((v, i) => `${(i * w / Math.max(1, series.length - 1)).toFixed(1)},${(h - 2 - v / top * (h - 4)).toFixed(1)}`).join(" ");
  return svg("svg", {class: "spark", width: w, height: h, "aria-hidden": "true"},
    ...[["sent", sent], ["acked", acked]].map(([cls, series]) => svg("polyline", {class: cls, points: line(series)})));
}

// A round top for an axis: 1, 2 or 5 times a power of ten, at least the highest value.
function niceTop(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map(m => m * p).find(t => t >= v * (1 - 1e-9));
}
function figure(v) { return v === null || v === undefined ? "not read" : Number.isInteger(v) ? String(v) : v.toFixed(2); }
function ago(s) { return s === 0 ? "now" : `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")} ago`; }

// A chart with axes over the last 5 minutes: y from 0 to a round top, x in minutes before now,
// a gap where nobody read the queue. Focus it (Tab) and move along it with the arrow keys, Home
// and End (or the pointer): the readout says the values there.
function chart(id, title, unit, step, series, state) {
  const W = 400, H = 160, L = 42, R = 12, T = 10, B = 24;
  const n = series[0].values.length;
  const top = niceTop(Math.max(0, ...series.flatMap(s => s.values.filter(v => v !== null))));
  const x = i => L + i * (W - L - R) / Math.max(1, n - 1);
  const y = v => T + (H - T - B) * (1 - v / top);
  const plot = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title}, ${unit}, last 5 minutes`});
  for (const t of [0, top / 2, top]) {
    plot.append(svg("line", {class: "grid", x1: L, x2: W - R, y1: y(t), y2: y(t)}),
      svg("text", {class: "tick y", x: L - 5, y: y(t) + 4, "text-anchor": "end"}, figure(t)));
  }
  for (let m = 0; m <= 5; m++) {
    const i = n - 1 - m * 60 / step;
    if (i < 0) break;
    plot.append(svg("line", {class: "grid", x1: x(i), x2: x(i), y1: H - B, y2: H - B + 4}),
      svg("text", {class: "tick x", x: x(i), y: H - 6, "text-anchor": m === 0 ? "end" : i === 0 ? "start" : "middle"},
        m === 0 ? "now" : `-${m} min`));
  }
  plot.append(svg("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}),
    svg("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
  for (const s of series) {
    let points = [];
    const flush = () => {
      if (points.length === 1) plot.append(svg("circle", {class: "dot " + s.cls, cx: points[0][0], cy: points[0][1], r: 2.5}));
      else if (points.length) plot.append(svg("polyline", {class: "line " + s.cls, points: points.map(p => p.join(",")).join(" ")}));
      points = [];
    };
    s.values.forEach((v, i) => { if (v === null) flush(); else points.push([x(i).toFixed(1), y(v).toFixed(1)]); });
    flush();
  }
  const cursors = state.cursors || (state.cursors = {});
  const cursor = svg("line", {class: "cursor", y1: T, y2: H - B});
  plot.append(cursor);
  const readout = el("output", {class: "readout"});
  const show = (i) => {
    cursors[id] = i;
    cursor.setAttribute("x1", x(i)); cursor.setAttribute("x2", x(i));
    readout.textContent = `${ago((n - 1 - i) * step)}: ` + series.map(s => `${s.label} ${figure(s.values[i])}`).join(", ");
  };
  show(cursors[id] === undefined ? n - 1 : cursors[id]);
  return el("figure", {class: "chart", id, tabindex: 0, "aria-label": `${title} (${unit}): arrow keys, Home and End move along the last 5 minutes`,
    onkeydown: (event) => {
      const next = {ArrowLeft: cursors[id] - 1, ArrowRight: cursors[id] + 1, Home: 0, End: n - 1}[event.key];
      if (next === undefined) return;
      event.preventDefault();
      show(Math.min(n - 1, Math.max(0, next)));
    },
    onpointermove: (event) => {
      const r = plot.getBoundingClientRect();
      const i = Math.round(((event.clientX - r.left) * W / r.width - L) / (W - L - R) * (n - 1));
      show(Math.min(n - 1, Math.max(0, i)));
    }},
    el("figcaption", {}, el("strong", {}, title), ` (${unit})`,
      el("span", {class: "legend"}, series.map(s => el("span", {class: "key " + s.cls}, s.label)))),
    plot, el("div", {"aria-live": "polite"}, readout));
}

function charts(s, step, deadLetterQueue, state) {
  return el("div", {class: "charts"},
    chart("chart-depth", "Messages", "count", step, [
      {label: "ready", cls: "ready", values: s.ready_series}, {label: "scheduled", cls: "scheduled", values: s.scheduled_series},
      {label: "in flight", cls: "leased", values: s.leased_series}], state),
    chart("chart-rates", "Sent and acked", "per second", step, [
      {label: "sent", cls: "sent", values: s.sent_series}, {label: "acked", cls: "acked", values: s.acked_series}], state),
    deadLetterQueue ? chart("chart-dead", `Dead-lettered to ${deadLetterQueue}`, "per second", step, [
      {label: "dead-lettered", cls: "dead", values: s.dead_rate_series}], state) : null);
}

// The red mark: why a queue needs a look, said on the row (hover or focus) and in the legend.
const MARKS = {
  "stalled": "ready messages wait and nobody takes them: the same message has been the oldest ready one for a minute",
  "dead-lettering": "messages went to its dead-letter queue in the last minute"};

function marks(q) {
  return q.marks.map(m => el("span", {class: "mark " + m.kind, tabindex: 0, title: `${m.kind}: ${m.text}`}, m.kind));
}

function legend() {
  return el("dl", {class: "legend-marks", id: "marks-legend"},
    el("dt", {}, el("span", {class: "mark"}, "red")), el("dd", {}, "the queue needs a look; its mark says why:"),
    Object.entries(MARKS).map(([kind, text]) => [el("dt", {}, el("span", {class: "mark " + kind}, kind)), el("dd", {}, text)]),
    el("dt", {}, ""), el("dd", {class: "muted"}, "A dead-letter queue is never marked stalled: its messages wait for you by design. " +
      "Marks need a minute of this page open: the server samples the counts when a page reads them."));
}

// -- pages ---------------------------------------------------------------------------

async function queuesPage(page) {
  const data = await getJSON("/api/queues");
  const rows = data.queues.map(q => el("tr", {"data-queue": q.name, class: q.marks.length ? "alarm" : null},
    el("td", {class: "name"}, el("a", {href: "#/queue/" + encodeURIComponent(q.name)}, q.name), " ", marks(q)),
    el("td", {class: "ready"}, q.ready), el("td", {class: "scheduled"}, q.scheduled),
    el("td", {class: "leased"}, q.leased), el("td", {class: "dead_lettered"}, q.dead_lettered),
    el("td", {class: "oldest_ready_age"}, age(seconds(q.oldest_ready_age))),
    el("td", {class: "send_rate"}, rate(q.send_rate)), el("td", {class: "ack_rate"}, rate(q.ack_rate)),
    el("td", {class: "chart", title: `sent (blue) and acked (green) per second, ${data.rate_step} s a point, last 5 minutes`},
       spark(q.sent_series, q.acked_series))));
  page.replaceChildren(
    el("h1", {}, "Queues"),
    el("div", {class: "scroll"}, el("table", {id: "queues"},
      el("thead", {}, el("tr", {}, ["Queue", "Ready", "Scheduled", "In flight", "Dead-lettered", "Oldest ready",
        "Sent", "Acked", "Last 5 min"].map((t, i) => el("th", {class: i ? null : "name"}, t)))),
      el("tbody", {}, rows))),
    data.queues.length ? null : el("p", {class: "muted"}, "No queues to show."),
    data.denied.length ? el("p", {class: "muted", id: "denied"},
      "Not shown (this token lacks the select privilege): " + data.denied.join(", ")) : null,
    legend());
}

function payloadText(value, type) {
  if (value === null || value === undefined) return "";
  if (type === "JSON") return JSON.stringify(value, null, 2);
  if (type === "STRING") return value;
  const bytes = atob(value);  // BYTES arrive in base64
  return Array.from(bytes, c => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ");
}

const FOLD_CHARS = 160, FOLD_LINES = 4;

// A long payload folded to its first line (open it to read all, copy it whole); a short one as is.
function payloadCell(text, id, state) {
  const lines = text.split("\n");
  if (text.length <= FOLD_CHARS && lines.length <= FOLD_LINES) return el("pre", {class: "payload"}, text);
  const open = state.open || (state.open = new Set());
  const head = lines[0].slice(0, 80);
  return el("details", {class: "payload", open: open.has(id),
      ontoggle: (event) => { if (event.target.open) open.add(id); else open.delete(id); }},
    el("summary", {}, head + (head.length < text.length ? " …" : ""), " ",
      el("span", {class: "muted size"}, `(${text.length.toLocaleString("en")} characters)`)),
    el("pre", {class: "payload"}, text),
    el("button", {class: "copy", type: "button", onclick: (event) => copy(text, event.target)}, "Copy"));
}

async function copy(text, button, label) {
  try { await navigator.clipboard.writeText(text); button.textContent = label ? `${label}: copied` : "Copied"; }
  catch (e) { button.textContent = "Copy refused by the browser"; }
}

function time(ts) { return ts ? ts.replace("T", " ").replace(/\.\d+Z$|Z$/, "Z") : ""; }

async function queuePage(page, name, state) {
  const path = "/api/queues/" + encodeURIComponent(name);
  const [info, peek] = await Promise.all([
    getJSON(path),
    getJSON(`${path}/messages?` + new URLSearchParams(Object.assign({page_size: 20,
      page_token: state.tokens[state.tokens.length - 1]}, state.filter || {})))]);
  const q = info.queue, s = info.stats;
  const definition = [
    ["Keys", q.key_columns.map(c => `${c.name} ${c.type}` + (c.generated_as ? ` AS (${c.generated_as}) STORED` : "")).join(", ")], ["Payload", q.payload_type],
    ["Lease", q.lease_duration], ["Backoff", `${q.initial_backoff} .. ${q.max_backoff}`],
    ["Max delivery attempts", q.max_delivery_attempts || "unlimited"], ["Dead-letter queue", q.dead_letter_queue || "none"],
    ["Parent", q.parent_table || "none"], ["Retention", q.message_retention_duration || "until acked"], ["Archive", q.archive_duration ? `acked kept ${q.archive_duration}` : "none (an ack deletes)"],
    ["Message ordering", el("span", {id: "ordering"}, q.enable_message_ordering ? "on (ordering keys)" : "off")], ["Dead letters of", info.dead_letter_sources.join(", ") || "no queue"],
    ["Limits", el("span", {id: "limits"}, limitsOf(q, s))],
    ["Paused", el("span", {id: "paused"}, [q.disable_send && "send", q.disable_delivery && "delivery"].filter(Boolean).join(", ") || "no")]];
  // A dead letter's own attempts start again at 0 in the dead-letter queue: what counts is
  // where it failed, after how many attempts, and why.
  const dead = peek.messages.some(m => m.dead_letter);
  // Priority and headers get columns when a message on the page has them.
  const tagged = peek.messages.some(m => m.priority || Object.keys(m.headers).length);
  // So does the ordering key (a HELD message waits for an earlier one of its key).
  const ordered = peek.messages.some(m => m.ordering_key);
  const messages = peek.messages.map(m => {
    const id = JSON.stringify(m.key);
    return el("tr", {class: "message", "data-key": id},
      el("td", {class: "text key"}, id),
      el("td", {class: "text"}, payloadCell(payloadText(m.payload, peek.payload_type), id, state)),
      el("td", {class: "state"}, m.state), el("td", {class: "attempts"}, m.delivery_attempt),
      ordered ? el("td", {class: "text ordering-key"}, m.ordering_key || el("span", {class: "muted"}, "none")) : null,
      dead ? [el("td", {class: "text source"}, m.dead_letter ? m.dead_letter.source_queue : ""),
        el("td", {class: "source-attempts"}, m.dead_letter ? m.dead_letter.delivery_attempts : ""),
        el("td", {class: "text failure"}, m.dead_letter ? m.dead_letter.last_failure || el("span", {class: "muted"}, "none given") : ""),
        el("td", {class: "time"}, m.dead_letter ? time(m.dead_letter.dead_letter_time) : "")] : null,
      tagged ? [el("td", {class: "priority"}, m.priority),
        el("td", {class: "text headers"}, Object.entries(m.headers).sort().map(([k, v]) =>
          el("div", {class: "header"}, el("span", {class: "muted"}, k + "="), v)))] : null,
      el("td", {class: "text row-actions"}, messageActions(name, m, info, peek.payload_type, state)),
      el("td", {class: "time"}, time(m.enqueue_time)), el("td", {class: "time"}, time(m.deliver_time)),
      el("td", {class: "time"}, time(m.lease_expiration_time)));
  });
  const actions = el("div", {class: "actions", id: "queue-actions"},
    el("button", {id: "purge", disabled: !info.may_purge, title: info.may_purge ? null : "this token may not purge it",
      onclick: () => purge(name)}, "Purge"),
    ["send", "delivery"].map(what => {
      const field = "disable_" + what, paused = q[field];
      return el("button", {id: `${paused ? "resume" : "pause"}-${what}`, disabled: !info.may_pause,
        title: info.may_pause ? null : "this token may not update the queue (admin)",
        onclick: () => pause(name, field, !paused)}, `${paused ? "Resume" : "Pause"} ${what}`);
    }),
    info.dead_letter_sources.length ? el("button", {id: "redrive", disabled: !info.may_redrive,
      onclick: () => redrive(name, info.dead_letter_sources[0])}, `Redrive to ${info.dead_letter_sources[0]}`) : null,
    el("progress", {id: "redrive-progress", hidden: true, max: 1, value: 0}),
    el("span", {id: "action-result", tabindex: -1, role: "status"}, state.result || ""));
  const headings = ["Key", "Payload", "State", dead ? "Attempts here" : "Attempts", ...(ordered ? ["Ordering key"] : []),
    ...(dead ? ["Dead letter of", "Attempts there", "Last failure", "Dead-lettered"] : []),
    ...(tagged ? ["Priority", "Headers"] : []), "Actions", "Enqueued", "Deliver at", "Lease ends"];
  page.replaceChildren(
    el("h1", {}, "Queue ", el("span", {id: "queue-name"}, name), " ", marks(s)),
    el("dl", {class: "def"}, definition.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("p", {id: "queue-counts"}, `ready ${s.ready} · scheduled ${s.scheduled} · ` +
      (s.held ? `held ${s.held} · ` : "") + `in flight ${s.leased} · ` +
      `dead-lettered ${s.dead_lettered} · oldest ready ${age(seconds(s.oldest_ready_age))}`),
    s.marks.length ? el("ul", {id: "queue-marks"}, s.marks.map(m => el("li", {}, el("span", {class: "mark " + m.kind}, m.kind), ": ", m.text))) : null,
    charts(s, info.rate_step, q.dead_letter_queue, state),
    actions,
    el("div", {class: "panels"}, sendForm(name, info, state), settingsForm(name, info, state)),
    consumers(info.consumers),
    el("h2", {}, "Messages, in delivery order"),
    el("p", {}, el("a", {id: "archive-link", href: `#/queue/${encodeURIComponent(name)}/archive`}, "Archived (acked) messages")),
    searchForm(state),
    el("div", {class: "scroll", id: "messages-region", tabindex: 0, role: "region", "aria-label": "Messages (scrolls with the arrow keys)"}, el("table", {id: "messages"},
      el("thead", {}, el("tr", {}, headings.map(t => el("th", {class: "name"}, t)))),
      el("tbody", {}, messages))),
    peek.messages.length ? null : el("p", {class: "muted", id: "no-messages"},
      state.filter ? "No messages match." : "No messages."),
    el("p", {},
      el("button", {id: "first-page", disabled: state.tokens.length === 1, onclick: () => { state.tokens = [""]; refresh(); }}, "First page"),
      el("button", {id: "next-page", disabled: !peek.next_page_token,
        onclick: () => { state.tokens.push(peek.next_page_token); refresh(); }}, "Next page")));
}

// -- the archive ---------------------------------------------------------------------

// The queue's archive (the acked messages it keeps for its archive_duration), in ack order a
// page at a time, in the messages table's look; Replay sends the range of ack times shown
// back into the queue (a Replay, after a confirmation that counts it).
async function archivePage(page, name, state) {
  const path = "/api/queues/" + encodeURIComponent(name);
  const data = await getJSON(`${path}/archive?` + new URLSearchParams({page_size: 20,
    page_token: state.tokens[state.tokens.length - 1]}));
  const shown = data.messages;
  const tagged = shown.some(m => m.priority || Object.keys(m.headers).length);
  const rows = shown.map(m => {
    const id = JSON.stringify(m.key);
    return el("tr", {class: "message", "data-key": id},
      el("td", {class: "text key"}, id),
      el("td", {class: "text"}, payloadCell(payloadText(m.payload, data.payload_type), id + m.ack_time, state)),
      el("td", {class: "time ack-time"}, time(m.ack_time)),
      el("td", {class: "text ack-request"}, m.ack_request_id || el("span", {class: "muted"}, "none")),
      el("td", {class: "attempts"}, m.delivery_attempt),
      tagged ? [el("td", {class: "priority"}, m.priority),
        el("td", {class: "text headers"}, Object.entries(m.headers).sort().map(([k, v]) =>
          el("div", {class: "header"}, el("span", {class: "muted"}, k + "="), v)))] : null,
      el("td", {class: "time"}, time(m.enqueue_time)));
  });
  const range = shown.length ? {from: shown[0].ack_time, through: shown[shown.length - 1].ack_time} : null;
  const headings = ["Key", "Payload", "Acked", "Acked by request", "Attempts", ...(tagged ? ["Priority", "Headers"] : []), "Enqueued"];
  page.replaceChildren(
    el("h1", {}, "Queue ", el("a", {id: "queue-name", href: "#/queue/" + encodeURIComponent(name)}, name), ": archived"),
    el("p", {class: "muted", id: "archive-kept"}, data.archive_duration
      ? `Acked messages are kept ${data.archive_duration}, in ack order; Replay sends those acked in the range shown back into the queue.`
      : "This queue keeps no archive now (an ack deletes): set Archive in its settings to keep acked messages."),
    el("div", {class: "actions"},
      el("button", {id: "replay", disabled: !range || !data.may_replay || !data.archive_duration,
        title: data.may_replay ? null : "this token may not replay it (send and select)",
        onclick: () => replayRange(name, range)}, "Replay the range shown"),
      el("span", {id: "action-result", role: "status"}, state.result || "")),
    el("div", {class: "scroll"}, el("table", {id: "archived"},
      el("thead", {}, el("tr", {}, headings.map(t => el("th", {class: "name"}, t)))),
      el("tbody", {}, rows))),
    shown.length ? null : el("p", {class: "muted", id: "no-messages"}, "No archived messages."),
    el("p", {},
      el("button", {id: "first-page", disabled: state.tokens.length === 1, onclick: () => { state.tokens = [""]; refresh(); }}, "First page"),
      el("button", {id: "next-page", disabled: !data.next_page_token,
        onclick: () => { state.tokens.push(data.next_page_token); refresh(); }}, "Next page")));
}

async function replayRange(name, range) {
  const path = `/api/queues/${encodeURIComponent(name)}/replay`;
  try {
    const count = await (await api(path, {method: "POST", body: JSON.stringify(Object.assign({validate_only: true}, range))})).json();
    if (!confirm(`Send the ${count.remaining} archived message(s) of ${name} acked from ${time(range.from)} through ` +
        `${time(range.through)} back into it? Those whose key is in the queue now are skipped.`)) return;
    const done = await (await api(path, {method: "POST", body: JSON.stringify(Object.assign({request_id: newId()}, range))})).json();
    current.state.result = `Replayed: sent ${done.sent} back into ${name}` +
      (done.skipped ? `, skipped ${done.skipped} (their key is in the queue)` : "") + ".";
  } catch (e) { current.state.result = "Refused: " + e.message; }
  refresh();
}

// -- the send form, the settings, the consumers ------------------------------------

function newId() { return crypto.randomUUID(); }

// A panel (details) that stays open or closed across the page's redraws.
function panel(id, title, box, ...children) {
  return el("details", {id, class: "panel", open: box.open,
    ontoggle: (event) => { box.open = event.target.open; }}, el("summary", {}, title), ...children);
}

// A field of a form whose draft is kept in ``box.draft`` across redraws; ``changed`` runs on input.
function field(box, name, label, attrs, changed) {
  const oninput = (event) => { box.draft[name] = event.target.value; if (changed) changed(); };
  const value = box.draft[name] ?? "";
  const input = attrs.tag === "select"
    ? el("select", {id: attrs.id, onchange: oninput}, attrs.options.map(o => el("option", {value: o, selected: String(value) === String(o)}, o)))
    : attrs.tag === "textarea" ? el("textarea", {id: attrs.id, rows: attrs.rows || 3, cols: 40, placeholder: attrs.placeholder, oninput}, value)
    : el("input", Object.assign({value, oninput}, attrs));
  return el("label", {}, el("span", {}, label), input);
}

const KEY_HINT = {INT64: "an integer", STRING: "text", BYTES: "base64", TIMESTAMP: "2026-01-02T03:04:05Z", BOOL: ""};
const PAYLOAD_HINT = {JSON: "JSON, e.g. {\"id\": 1}", STRING: "text", BYTES: "base64"};

// The key columns a send gives: a generated one (AS (expr) STORED) the database computes.
const sentKeyColumns = (q) => q.key_columns.filter(c => !c.generated_as);

// A Send, as spanq.v1's: the form's request id stays the same until a field changes, so a
// second submit of the same form answers the first (replayed) and stores nothing more.
function sendForm(name, info, state) {
  const q = info.queue;
  const box = state.send || (state.send = {open: false, draft: {}, id: newId()});
  const renew = () => { box.id = newId(); };
  const keyFields = info.key_generated ? [el("p", {class: "muted"}, "The key is generated (a UUID).")]
    : sentKeyColumns(q).map((c, i) => field(box, "key" + i, `${c.name} (${c.type})`,
        c.type === "BOOL" ? {tag: "select", id: "send-key-" + i, options: ["true", "false"]}
          : {id: "send-key-" + i, type: "text", placeholder: KEY_HINT[c.type], size: 24}, renew));
  return panel("send-panel", "Send a message", box, el("form", {id: "send", class: "fields", onsubmit: (event) => {
      event.preventDefault();
      send(name, info, box);
    }},
    keyFields,
    field(box, "payload", `Payload (${q.payload_type})`, {tag: "textarea", id: "send-payload", placeholder: PAYLOAD_HINT[q.payload_type]}, renew),
    field(box, "delay", "Delay (seconds)", {id: "send-delay", type: "number", step: "any", placeholder: "0", size: 6}, renew),
    field(box, "priority", "Priority", {tag: "select", id: "send-priority", options: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}, renew),
    // Only an ordering queue takes a key (any other refuses it): the field is shown for those alone.
    q.enable_message_ordering ? field(box, "ordering_key", "Ordering key", {id: "send-ordering-key", type: "text", placeholder: "none", size: 24}, renew) : null,
    field(box, "headers", "Headers (KEY=VALUE, one a line)", {tag: "textarea", id: "send-headers", rows: 2, placeholder: "source=console"}, renew),
    el("p", {},
      el("button", {type: "submit", id: "send-submit", disabled: !info.may_send,
        title: info.may_send ? null : "this token may not send to it"}, "Send"),
      el("button", {type: "button", id: "send-new", onclick: () => { box.id = newId(); box.result = null; refresh(); }}, "New"),
      el("span", {class: "muted"}, " request id ", el("code", {id: "send-request-id"}, box.id))),
    el("p", {id: "send-result", role: "status", class: box.result && box.result.error ? "error" : null},
      box.result ? box.result.text : "")));
}

async function send(name, info, box) {
  const key = info.key_generated ? [] : sentKeyColumns(info.queue).map((c, i) => {
    const v = box.draft["key" + i] ?? (c.type === "BOOL" ? "true" : "");
    return c.type === "BOOL" ? v === "true" : v;
  });
  const d = box.draft;
  try {
    const result = await (await api(`/api/queues/${encodeURIComponent(name)}/send`, {method: "POST", body: JSON.stringify({
      request_id: box.id, key, payload: d.payload || "", delay: d.delay || "", headers: d.headers || "", priority: d.priority || "0",
      ordering_key: d.ordering_key || ""})})).json();
    box.result = {text: result.replayed
      ? `Already sent with request id ${box.id}: nothing stored again (change a field, or New, to send another).`
      : `Sent: key ${JSON.stringify(result.keys[0])}.`};
  } catch (e) { box.result = {error: true, text: "Refused: " + e.message}; }
  refresh();
}

// The queue's per-key concurrency and rate limit, with what they hold back now (GetQueueStats).
function limitsOf(q, s) {
  const shown = [];
  if (q.max_in_flight_per_key) shown.push(`${q.max_in_flight_per_key} in flight per ${q.concurrency_key} `
    + `(${s.key_limited} due held, ${s.keys_at_limit} keys at the limit)`);
  if (q.rate_limit) shown.push(`${q.rate_limit}/s, burst ${q.rate_limit_burst || Math.max(1, Math.ceil(q.rate_limit))} `
    + `(${s.rate_limited} held back so far, ${Number(s.rate_limit_tokens).toFixed(1)} tokens)`);
  return shown.join("; ") || "none";
}

// The queue's settings as the form shows them (seconds for durations; 0: none).
function settingsOf(q) {
  return {lease_duration: seconds(q.lease_duration), initial_backoff: seconds(q.initial_backoff),
    max_backoff: seconds(q.max_backoff), max_delivery_attempts: q.max_delivery_attempts || 0,
    dead_letter_queue: q.dead_letter_queue || "", message_retention_duration: seconds(q.message_retention_duration),
    archive_duration: seconds(q.archive_duration), max_in_flight_per_key: q.max_in_flight_per_key || 0,
    concurrency_key: q.concurrency_key || "", rate_limit: q.rate_limit || 0, rate_limit_burst: q.rate_limit_burst || 0,
    enable_message_ordering: q.enable_message_ordering ? "on" : "off"};
}

const SETTINGS = [["lease_duration", "Lease (seconds)"], ["initial_backoff", "Initial backoff (seconds)"],
  ["max_backoff", "Max backoff (seconds)"], ["max_delivery_attempts", "Max delivery attempts (0: unlimited)"],
  ["dead_letter_queue", "Dead-letter queue (empty: none)"], ["message_retention_duration", "Retention (seconds, 0: until acked)"],
  ["archive_duration", "Archive acked for (seconds, 0: an ack deletes)"],
  ["max_in_flight_per_key", "Max in flight per key (0: no limit)"],
  ["concurrency_key", "Concurrency key column (empty: the first)"],
  ["rate_limit", "Rate limit (per second, 0: none)"], ["rate_limit_burst", "Rate limit burst (0: a second's worth)"],
  ["enable_message_ordering", "Message ordering (ordering keys)"]];
// The fields that are not durations: as typed (text), or numbers when they read as one.
const TEXT_SETTINGS = ["dead_letter_queue", "concurrency_key"];
const NUMBER_SETTINGS = ["max_delivery_attempts", "max_in_flight_per_key", "rate_limit", "rate_limit_burst"];

// An UpdateQueue of the fields changed (the dead-letter pair goes together).
function settingsForm(name, info, state) {
  const current = settingsOf(info.queue);
  const box = state.settings || (state.settings = {open: false});
  const fresh = () => Object.fromEntries(Object.entries(current).map(([k, v]) => [k, String(v)]));
  if (!box.draft) box.draft = fresh();
  return panel("settings-panel", "Edit settings", box, el("form", {id: "settings", class: "fields", onsubmit: (event) => {
      event.preventDefault();
      saveSettings(name, current, box);
    }},
    SETTINGS.map(([k, label]) => field(box, k, label, k === "enable_message_ordering"
      ? {id: "setting-" + k, tag: "select", options: ["off", "on"]}
      : {id: "setting-" + k, type: "text", size: TEXT_SETTINGS.includes(k) ? 20 : 8})),
    el("p", {},
      el("button", {type: "submit", id: "settings-save", disabled: !info.may_pause,
        title: info.may_pause ? null : "this token may not update the queue (admin)"}, "Save"),
      el("button", {type: "button", id: "settings-reset", onclick: () => { box.draft = fresh(); box.result = null; refresh(); }}, "Reset")),
    el("p", {id: "settings-result", role: "status", class: box.result && box.result.error ? "error" : null},
      box.result ? box.result.text : "")));
}

async function saveSettings(name, current, box) {
  const changed = {};
  for (const [k] of SETTINGS) {
    const v = String(box.draft[k] ?? "").trim();
    if (v !== String(current[k])) changed[k] = v;
  }
  if ("max_delivery_attempts" in changed || "dead_letter_queue" in changed) {
    changed.max_delivery_attempts ??= String(current.max_delivery_attempts);
    changed.dead_letter_queue ??= current.dead_letter_queue;
  }
  if (!Object.keys(changed).length) { box.result = {text: "Nothing changed."}; refresh(); return; }
  // spanq.v1 Queue's JSON form: a duration "30s", a count a number; text that is neither goes as typed, for the server to refuse.
  const body = Object.fromEntries(Object.entries(changed).map(([k, v]) =>
    [k, TEXT_SETTINGS.includes(k) ? v : k === "enable_message_ordering" ? v === "on"
      : NUMBER_SETTINGS.includes(k) ? (/^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v)
      : (/^\d+(\.\d+)?$/.test(v) ? v + "s" : v)]));
  try {
    await api(`/api/queues/${encodeURIComponent(name)}/settings`, {method: "POST", body: JSON.stringify(body)});
    box.draft = null;  // drawn again from what the queue holds now
    box.result = {text: "Saved: " + Object.keys(changed).join(", ") + "."};
  } catch (e) { box.result = {error: true, text: "Refused: " + e.message}; }
  refresh();
}

// The queue's open Receive streams on every server of the database (each --workers child,
// each replica): this one's live, the others' as of their last report (every few seconds).
function consumers(data) {
  return el("section", {id: "consumers-section"}, el("h2", {}, "Consumers"),
    el("p", {class: "muted"}, `Open Receive streams of this queue on every server; this page is served by ${data.server}. ` +
      "Another server's figures are as of its last report (the Reported column)."),
    data.streams.length ? el("div", {class: "scroll", id: "consumers-region", tabindex: 0, role: "region",
      "aria-label": "Consumers (scrolls with the arrow keys)"}, el("table", {id: "consumers"},
      el("thead", {}, el("tr", {}, ["Client", "Server", "Opened", "Age", "Leases held", "Delivered", "Max outstanding", "Batch", "Lease", "Reported"]
        .map((t, i) => el("th", {class: i ? null : "name"}, t)))),
      el("tbody", {}, data.streams.map(c => el("tr", {class: "consumer"},
        el("td", {class: "text peer"}, c.peer || "unknown"), el("td", {class: "text server"}, c.server), el("td", {class: "time"}, time(c.opened_at.replace("+00:00", "Z"))),
        el("td", {class: "age"}, age(c.age_seconds)), el("td", {class: "held"}, c.held), el("td", {class: "delivered"}, c.delivered),
        el("td", {class: "max-outstanding"}, c.max_outstanding), el("td", {class: "batch"}, c.max_batch_size),
        el("td", {class: "lease"}, c.lease_duration_seconds + " s"),
        el("td", {class: "reported"}, c.server === data.server ? "live" : `${Math.round(c.reported_ago)} s ago`))))))
      : el("p", {class: "muted", id: "no-consumers"}, "No open Receive streams."));
}

// One message's actions, each a POST the server checks as the RPC it stands for; delete and
// redrive ask first. The result is said beside the queue's actions.
function messageActions(name, m, info, type, state) {
  const key = JSON.stringify(m.key);
  const to = m.dead_letter ? m.dead_letter.source_queue : info.dead_letter_sources[0];
  return [
    el("button", {class: "delete", type: "button", disabled: !info.may_delete, title: info.may_delete ? null : "this token may not ack it",
      onclick: () => messageAction(name, "delete", m.key, null, `Delete the message with key ${key} of ${name}? This cannot be undone.`)}, "Delete"),
    m.state === "LEASED" ? el("button", {class: "release", type: "button", disabled: !info.may_release,
      onclick: () => messageAction(name, "release", m.key, null, null)}, "Release now") : null,
    m.dead_letter || info.dead_letter_sources.length ? el("button", {class: "redrive-one", type: "button", disabled: !info.may_redrive,
      onclick: () => messageAction(name, "redrive", m.key, to, `Move the message with key ${key} back to ${to}?`)}, `Redrive to ${to}`) : null,
    copyMenu(m, type, state)];
}

// Copy a message's key, payload (as shown, whole) or the message itself as JSON (what the
// API answered: key, payload, state, attempts, times, headers) to the clipboard.
function copyMenu(m, type, state) {
  const what = {key: () => JSON.stringify(m.key), payload: () => payloadText(m.payload, type),
    json: () => JSON.stringify(m, null, 2)};
  const labels = {key: "Key", payload: "Payload", json: "Message as JSON"};
  const id = JSON.stringify(m.key);  // open across the page's redraws, as a folded payload is
  return el("details", {class: "copy-menu", open: state.copying === id,
      ontoggle: (event) => { if (event.target.open) state.copying = id; else if (state.copying === id) state.copying = null; }},
    el("summary", {title: "copy to the clipboard"}, "Copy"),
    el("div", {class: "menu"}, Object.keys(what).map(k =>
      el("button", {type: "button", class: "copy-" + k, onclick: (event) => copy(what[k](), event.target, labels[k])}, labels[k]))));
}

async function messageAction(name, action, key, to, question) {
  if (question && !confirm(question)) return;
  const said = {delete: "Deleted", release: "Released", redrive: "Redrove"}[action];
  try {
    const result = await (await api(`/api/queues/${encodeURIComponent(name)}/messages/${action}`,
      {method: "POST", body: JSON.stringify(to ? {key, to} : {key})})).json();
    current.state.result = `${said} the message with key ${JSON.stringify(key)}` + (result.to ? ` to ${result.to}.` : ".");
  } catch (e) { current.state.result = "Refused: " + e.message; }
  refresh();
}

// Search: the fields as typed are kept across the page's redraws; Search applies them.
const FILTERS = [["key_prefix", "Key starts with"], ["state", "State"], ["min_attempt", "Attempts at least"], ["text", "Payload holds"]];

function searchForm(state) {
  const draft = state.draft || (state.draft = {});
  const field = ([name, label]) => {
    // state.draft at the event, not this draw's: Clear replaces it before the page is redrawn.
    const oninput = (event) => { (state.draft || (state.draft = {}))[name] = event.target.value; };
    const input = name === "state"
      ? el("select", {id: "filter-" + name, onchange: oninput},
          ["", "READY", "SCHEDULED", "LEASED"].map(v => el("option", {value: v, selected: (draft[name] || "") === v}, v || "any")))
      : el("input", {id: "filter-" + name, value: draft[name] || "", oninput, size: name === "min_attempt" ? 4 : 16,
          type: name === "min_attempt" ? "number" : "search", min: name === "min_attempt" ? 0 : null});
    return el("label", {}, label, " ", input);
  };
  return el("form", {id: "search", class: "search", onsubmit: (event) => {
      event.preventDefault();
      const applied = Object.fromEntries(Object.entries(state.draft || {}).filter(([, v]) => v !== ""));
      state.filter = Object.keys(applied).length ? applied : null;
      state.tokens = [""];
      refresh();
    }},
    FILTERS.map(field), el("button", {type: "submit", id: "search-apply"}, "Search"),
    el("button", {type: "button", id: "search-clear", disabled: !state.filter && !Object.values(draft).some(Boolean),
      onclick: () => { state.draft = {}; state.filter = null; state.tokens = [""]; refresh(); }}, "Clear"),
    state.filter ? el("span", {class: "muted", id: "search-applied"}, "filtered: " +
      Object.entries(state.filter).map(([k, v]) => `${FILTERS.find(f => f[0] === k)[1].toLowerCase()} ${v}`).join(", ")) : null);
}

// A durable pause (UpdateQueue): sends refused, or nothing delivered, until resumed.
async function pause(name, field, paused) {
  try {
    await api(`/api/queues/${encodeURIComponent(name)}/pause`, {method: "POST", body: JSON.stringify({[field]: paused})});
    current.state.result = `${paused ? "Paused" : "Resumed"} ${field.replace("disable_", "")}.`;
  } catch (e) { current.state.result = "Refused: " + e.message; }
  refresh();
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
    el("p", {}, `${data.open_streams} Receive stream(s) open on every server of this database.`),
    el("table", {id: "streams"},
      el("thead", {}, el("tr", {}, el("th", {class: "name"}, "Queue"), el("th", {}, "Open streams (all servers)"),
        el("th", {}, "Leases in flight (all servers)"))),
      el("tbody", {}, data.queues.map(q => el("tr", {"data-queue": q.name},
        el("td", {class: "name"}, el("a", {href: "#/queue/" + encodeURIComponent(q.name), title: "its consumers, on its page"}, q.name)),
        el("td", {class: "streams"}, q.streams), el("td", {class: "leased"}, q.leased))))));
}

// -- routing and live refresh --------------------------------------------------------

let current = null;

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const archived = hash.match(/^\/queue\/(.+)\/archive$/);
  if (archived) return {draw: archivePage, args: [decodeURIComponent(archived[1])], state: {tokens: [""]}};
  const match = hash.match(/^\/queue\/(.+)$/);
  if (match) return {draw: queuePage, args: [decodeURIComponent(match[1])], state: {tokens: [""]}};
  if (hash === "/streams") return {draw: streamsPage, args: [], state: {}};
  return {draw: queuesPage, args: [], state: {}};
}

let paused = false;
let lastUpdate = null;

// The header says when the figures were read, whether the page is live, and since when they are stale.
function showRefresh(ok, message) {
  const box = document.getElementById("refresh-state");
  const clock = (d) => d ? d.toLocaleTimeString("en-GB") : "never";
  box.className = ok ? (paused ? "paused" : "live") : "stale";
  box.textContent = ok ? `${paused ? "Paused" : `Live, every ${REFRESH_MS / 1000} s`} · updated ${clock(lastUpdate)}`
    : `Not updated since ${clock(lastUpdate)}: ${message}`;
  document.getElementById("pause").textContent = paused ? "Resume" : "Pause";
}

// Where the focus is, so as to find it again in the redrawn page: by its id, else as the nth
// focusable element of the nearest element with an id or a message's key (a message's
// buttons, a folded payload). A button whose id changes with its state (Pause send, then
// Resume send) is found by its place in its holder.
const FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";
function focusPath(node) {
  const holder = node.parentElement && node.parentElement.closest("[id], [data-key]");
  const where = holder ? {id: holder.id, key: holder.dataset.key,
    i: Array.from(holder.querySelectorAll(FOCUSABLE)).indexOf(node)} : null;
  return {id: node.id, where};
}
function findAgain(path) {
  const byId = path.id && document.getElementById(path.id);
  if (byId || !path.where) return byId;
  const w = path.where;
  const holder = w.id ? document.getElementById(w.id)
    : Array.from(document.querySelectorAll("[data-key]")).find(n => n.dataset.key === w.key);
  return holder ? holder.querySelectorAll(FOCUSABLE)[w.i] : null;
}

async function refresh() {
  clearTimeout(timer);
  const mine = ++generation;
  const page = document.getElementById("page");
  // What has the focus when the page is replaced (not when the read began: focus moves while
  // it is under way, and typing must stay where it went), and the caret of text being typed in
  // (a search, the send form; a number field has none), to put back after. A focused element
  // that is gone (a deleted message's button) hands the focus to the result line that says why.
  let focused = null, caret = null;
  document.getElementById("refresh-state").classList.add("loading");
  try {
    // A slow answer for a page no longer shown must not draw over the one that is.
    const sink = {replaceChildren: (...nodes) => {
      if (mine !== generation) return;
      const active = document.activeElement && page.contains(document.activeElement) ? document.activeElement : null;
      focused = active ? focusPath(active) : null;
      caret = active && typeof active.selectionStart === "number" ? [active.selectionStart, active.selectionEnd] : null;
      page.replaceChildren(...nodes.filter(n => n !== null));
    }};
    await current.draw(sink, ...current.args, current.state);
    if (mine !== generation) return;
    const gone = focused && focused.where && focused.where.key !== undefined;  // a message's, deleted or moved on
    const again = focused && (findAgain(focused) || (gone ? document.getElementById("action-result") : null));
    if (again) {  // a chart read by keyboard, a search field being typed in, a message's button
      again.focus({preventScroll: true});
      if (caret && typeof again.setSelectionRange === "function") again.setSelectionRange(...caret);
    }
    lastUpdate = new Date();
    page.dataset.loaded = String(Date.now());
    showError("");
    showRefresh(true);
  } catch (e) {
    if (mine !== generation) return;
    showError(e.status === 401 ? "Give a token to see this page." : e.message);
    showRefresh(false, e.status === 401 ? "no token" : e.message);
    if (e.status === 403 || e.status === 404) page.replaceChildren();
  }
  if (mine === generation && !paused) timer = setTimeout(refresh, REFRESH_MS);
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
  document.getElementById("pause").addEventListener("click", () => { paused = !paused; refresh(); });
  // Escape closes the open panel, copy menu or folded payload the focus is in, and leaves
  // the focus on its summary, where Enter opens it again.
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !document.activeElement) return;
    const open = document.activeElement.closest("details[open]");
    if (!open) return;
    event.preventDefault();
    open.open = false;
    open.querySelector("summary").focus();
  });
  window.addEventListener("hashchange", () => { current = route(); refresh(); });
  current = route();
  refresh();
}

start();
