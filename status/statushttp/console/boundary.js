// orisun console: one boundary. The charts of the last 15 minutes (the
// node's history, polled once a second for the seconds newer than the
// last it has), the boundary's figures from /status (every 2 s), the live
// tail (server-sent events) and the log (pages of 50). Event data is
// written as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
// name is the boundary's name from the address; null when the address
// does not decode (a malformed % escape): the page says so.
const name = (() => {
  try { return decodeURIComponent(location.pathname.replace(/^\/console\/boundary\//, "").replace(/\/$/, "")); } catch (e) { return null; }
})();
const base = "/console/boundary/" + encodeURIComponent(name);
const num = new Intl.NumberFormat("en-US");
const fetchHeaders = { "X-Orisun-Console": "fetch" }; // a 401 without a browser prompt: the page offers its login link

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

async function getJSON(url) {
  const resp = await fetch(url, { cache: "no-store", headers: fetchHeaders });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const err = new Error((body && body.error) || resp.status + " " + resp.statusText);
    err.status = resp.status;
    throw err;
  }
  return body;
}

// ---- Charts ----------------------------------------------------------

const span = 900; // seconds kept and drawn
const hist = { end: 0, t: [], appended: [], published: [], lag_events: [], lag_seconds: [] };

function appendHistory(h) {
  if (!h.appended) return;
  for (let i = 0; i < h.appended.length; i++) {
    hist.t.push(h.start + i);
    for (const k of ["appended", "published", "lag_events", "lag_seconds"]) hist[k].push(h[k][i]);
  }
  hist.end = h.end;
  const drop = hist.t.length - span;
  if (drop > 0) for (const k of ["t", "appended", "published", "lag_events", "lag_seconds"]) hist[k].splice(0, drop);
}

function css(v) { return getComputedStyle(document.body).getPropertyValue(v).trim() || "#888"; }

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// draw plots series (arrays of numbers or null: a hole) over the last 15
// minutes ending at hist.end; the canvas keeps the last values in data-*
// attributes for the tests and for a reader of the page's source.
function draw(canvas, series, fmt, integer) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight || 140;
  if (canvas.width !== Math.round(w * dpr)) { canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr); }
  const c = canvas.getContext("2d");
  c.setTransform(dpr, 0, 0, dpr, 0, 0);
  c.clearRect(0, 0, w, h);
  const left = 48, right = 8, top = 8, bottom = 18;
  let peak = 0;
  for (const s of series) for (const v of s.data) if (v !== null && v > peak) peak = v;
  const ymax = integer ? Math.max(2, niceMax(peak)) : niceMax(peak);
  const x = (t) => left + (w - left - right) * (1 - (hist.end - t) / (span - 1));
  const y = (v) => top + (h - top - bottom) * (1 - v / ymax);
  c.font = "11px system-ui, sans-serif";
  c.fillStyle = css("--muted");
  c.strokeStyle = css("--line");
  c.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const yy = Math.round(y(ymax * f)) + 0.5;
    c.beginPath(); c.moveTo(left, yy); c.lineTo(w - right, yy); c.stroke();
    c.textAlign = "right"; c.textBaseline = "middle";
    c.fillText(fmt(ymax * f), left - 4, yy);
  }
  c.textAlign = "center"; c.textBaseline = "alphabetic";
  for (const m of [15, 10, 5, 0]) c.fillText(m ? "−" + m + " min" : "now", Math.min(Math.max(x(hist.end - m * 60), left + 16), w - right - 12), h - 4);
  for (const s of series) {
    c.strokeStyle = css(s.color);
    c.lineWidth = 1.5;
    c.beginPath();
    let pen = false;
    for (let i = 0; i < hist.t.length; i++) {
      const v = s.data[i];
      // A hole (no sample, or a figure not known that second) is drawn
      // as one, not bridged.
      if (v === null || v === undefined || (i > 0 && hist.t[i] - hist.t[i - 1] > 1)) { pen = false; if (v === null || v === undefined) continue; }
      if (pen) c.lineTo(x(hist.t[i]), y(v)); else c.moveTo(x(hist.t[i]), y(v));
      pen = true;
    }
    c.stroke();
    let total = 0, last = null;
    for (const v of s.data) if (v !== null && v !== undefined) { total += v; last = v; }
    canvas.dataset[s.key + "Total"] = String(total);
    canvas.dataset[s.key + "Last"] = last === null ? "" : String(last);
  }
  canvas.dataset.end = String(hist.end);
}

function drawAll() {
  draw($("chart-rate"), [
    { key: "appended", data: hist.appended, color: "--chart-a" },
    { key: "published", data: hist.published, color: "--chart-b" },
  ], (v) => num.format(Math.round(v)), true);
  draw($("chart-lag"), [{ key: "lag", data: hist.lag_events, color: "--chart-a" }], (v) => num.format(Math.round(v)), true);
  draw($("chart-lag-seconds"), [{ key: "lag", data: hist.lag_seconds, color: "--chart-a" }], (v) => v.toFixed(v < 10 ? 1 : 0) + " s");
}

let histBusy = false;
async function pollHistory() {
  if (histBusy || document.hidden) return;
  histBusy = true;
  try {
    const h = await getJSON("/console/history/" + encodeURIComponent(name) + "?after=" + hist.end);
    appendHistory(h);
    drawAll();
    $("history-note").hidden = true;
  } catch (e) {
    $("history-note").hidden = false;
    $("history-note").textContent = "No history: " + e.message;
  } finally {
    histBusy = false;
  }
}

// ---- Figures from /status ----------------------------------------------

async function pollStatus() {
  if (document.hidden) return;
  try {
    const st = await getJSON("/status");
    $("node").textContent = "node " + st.node_id + (st.version ? " · " + st.version : "");
    const b = (st.boundaries || []).find((x) => x.name === name);
    if (!b) { $("banner").hidden = false; $("banner").textContent = "This node does not report boundary " + name + "."; return; }
    $("banner").hidden = true;
    document.body.classList.remove("stale");
    const state = el("span", "pill " + (b.state === "stalled" ? "bad" : b.state === "paused" ? "warn" : "ok"), b.state);
    state.id = "boundary-state";
    $("state").replaceChildren(state);
    $("figures").replaceChildren(
      ...[["head", b.head], ["published", b.published], ["lag", b.lag_events], ["lag s", b.lag_seconds.toFixed(1)],
        ["epoch", b.epoch], ["lease", (b.lease_holder || "none") + (b.lease_holder ? " · term " + b.lease_term : "")],
        ["stream", b.stream_last ? num.format(b.stream_first) + "–" + num.format(b.stream_last) : "empty"]]
        .map(([k, v]) => { const s = el("span", "figure", ""); s.dataset.figure = k; s.append(el("span", "sub-inline", k + " "), el("b", "", typeof v === "number" ? num.format(v) : v)); return s; }));
    $("reason").textContent = [b.reason, b.error, b.stream_error, b.warning].filter(Boolean).join(" · ");
    $("chart-note").textContent = b.state === "leading" ? "this node's view, one sample a second" :
      "this node's view, one sample a second; it does not lead the boundary, so published and lag are known on the leader's node";
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("banner").hidden = false;
    $("banner").textContent = "The node does not answer: " + e.message;
    document.body.classList.add("stale");
  }
}

// ---- Events: access, rendering ----------------------------------------

// access says whether this page may show events: "ok", "login" or "off"
// with why and how.
async function access() {
  try {
    await getJSON("/console/events");
    return { events: "ok" };
  } catch (e) {
    if (e.status === 401) return { events: "login" };
    if (e.status === 403) {
      try { return await getJSON("/console/access"); } catch (e2) { return { events: "off", why: e.message, how: "" }; }
    }
    return { events: "error", why: e.message };
  }
}

function gate(box, a) {
  box.hidden = false;
  if (a.events === "login") {
    box.replaceChildren(el("span", "", "The events need the console's login. "));
    const l = el("a", "", "Log in");
    l.id = box.id + "-login";
    l.href = "/console/login?next=" + encodeURIComponent(location.pathname + location.search);
    box.append(l);
  } else if (a.events === "off") {
    box.textContent = "The event pages are off: " + a.why + ". To turn them on, " + a.how + ".";
  } else {
    box.textContent = "The events cannot be shown: " + a.why;
  }
}

// filterLink links to the log filtered by params; followed on this page
// it keeps the charts and the tail, and the address says the filter.
function filterLink(params, text) {
  const a = el("a", "tag", text);
  a.href = base + "?" + new URLSearchParams(params).toString();
  a.addEventListener("click", (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0 || $("log-form").hidden) return;
    ev.preventDefault();
    history.pushState(null, "", a.href);
    showLogOf(new URLSearchParams(a.search));
  });
  return a;
}

// renderEvent: one event, its header line and its JSON pretty-printed
// (by the node, from the stored bytes);
// its tags link to the log filtered by them, its type to its type.
// Each event is one line (position, type, time, tags, the start of its
// data) that opens to its whole JSON; the first of a list is open.
function renderEvent(e) {
  const li = el("li", "event");
  li.dataset.position = String(e.position);
  li.dataset.id = e.id;
  const box = el("details");
  const head = el("summary", "event-head");
  head.append(el("b", "pos", "#" + e.position), " ", filterLink({ types: e.type }, e.type), " ",
    el("span", "sub-inline", new Date(e.time).toISOString()));
  const tags = el("span", "tags");
  for (const t of e.tags || []) tags.append(filterLink({ tags: t }, t));
  head.append(tags);
  // The node's text of the stored bytes, not JSON.stringify of what the
  // browser parsed (which rounds integers beyond 2^53, writes 1.0 as 1).
  const preview = e.data_json;
  head.append(el("span", "preview", preview.length > 120 ? preview.slice(0, 120) + "…" : preview));
  box.append(head, el("pre", "json", e.json));
  li.append(box);
  return li;
}

// openFirst opens the first event of a list, and only it.
function openFirst(list) {
  list.querySelectorAll("details[open]").forEach((d, i) => { if (i > 0 || d.closest("li") !== list.firstElementChild) d.open = false; });
  const d = list.querySelector("li.event details");
  if (d) d.open = true;
}

// ---- Log ---------------------------------------------------------------

const params = new URLSearchParams(location.search);
const logState = { view: "newest", from: 1, types: [], tags: [] };
readLogParams(params);

// readLogParams takes the log's view from the address: newest first
// (view=newest, the default, optionally before=P), or from a position
// (view=from, from=P); the filter is one parameter per type and per tag
// (types=a&tags=x&tags=y), each a whole value: a tag may hold a comma.
function readLogParams(p) {
  logState.from = Number(p.get("from")) || 1;
  logState.view = p.get("view") || (p.get("from") ? "from" : "newest");
  logState.before = Number(p.get("before")) || 0;
  logState.types = p.getAll("types").filter(Boolean);
  logState.tags = p.getAll("tags").filter(Boolean);
}

// filterParams adds the filter to p, one parameter per type and tag.
function filterParams(p) {
  for (const t of logState.types) p.append("types", t);
  for (const t of logState.tags) p.append("tags", t);
  return p;
}

function logPath(extra) {
  const p = filterParams(new URLSearchParams());
  for (const [k, v] of Object.entries(extra)) p.set(k, v);
  return "/console/events/" + encodeURIComponent(name) + "?" + p.toString();
}

// pages remembers the pages shown before this one, to go back.
const pages = [];
// loadLog shows one page: at = {from: P} (lowest first) or {before: P}
// (newest first, below P; 0: from the head).
async function loadLog(at) {
  const list = $("log");
  const newest = at.before !== undefined;
  try {
    const page = await getJSON(logPath(newest ? (at.before ? { before: String(at.before) } : {}) : { from: String(at.from) }));
    list.replaceChildren(...page.events.map(renderEvent));
    openFirst(list);
    const filtered = logState.types.length || logState.tags.length ? " matches the filter" : "";
    if (page.error) {
      list.append(el("li", "empty error", "The log cannot be read here: " + page.error));
    } else if (page.events.length === 0) {
      list.append(el("li", "empty", newest ? "No event" + filtered + (at.before ? " below position " + num.format(at.before) : "") + "." :
        "No event" + filtered + " from position " + num.format(at.from) + " (head " + num.format(page.head) + ")."));
    }
    const ps = page.events.map((e) => e.position);
    $("log-range").textContent = ps.length ? "positions " + num.format(Math.min(...ps)) + "–" + num.format(Math.max(...ps)) +
      " of " + num.format(page.head) + (newest ? ", newest first" : "") : "";
    $("log-pager").hidden = false;
    $("log-prev").textContent = newest ? "‹ newer" : "‹ earlier";
    $("log-next").textContent = newest ? "older ›" : "later ›";
    $("log-next").disabled = !page.more;
    $("log-next").onclick = () => { pages.push(at); loadLog(newest ? { before: Math.min(...ps) } : { from: Math.max(...ps) + 1 }); };
    $("log-prev").disabled = pages.length === 0 && (newest ? !at.before : at.from <= 1);
    $("log-prev").onclick = () => loadLog(pages.length ? pages.pop() : newest ? { before: 0 } : { from: Math.max(1, at.from - 50) });
    if (!newest) $("log-from").value = String(at.from);
    $("log-from").disabled = newest;
  } catch (e) {
    list.replaceChildren(el("li", "empty error", "The log cannot be read: " + e.message));
  }
}

function logStart() { return logState.view === "newest" ? { before: logState.before || 0 } : { from: logState.from }; }

function setupLog() {
  $("log-form").hidden = false;
  $("log-clear").href = base;
  $("log-view").addEventListener("change", () => { $("log-from").disabled = $("log-view").value === "newest"; });
  $("log-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    p.set("view", $("log-view").value);
    if ($("log-view").value === "from" && $("log-from").value) p.set("from", $("log-from").value);
    for (const t of typed("log-types", "types")) p.append("types", t);
    for (const t of typed("log-tags", "tags")) p.append("tags", t);
    history.pushState(null, "", base + "?" + p.toString());
    showLogOf(p);
  });
  window.addEventListener("popstate", () => showLogOf(new URLSearchParams(location.search)));
  showLogOf(params);
}

// typed is the filter of one of the form's boxes: what is typed there,
// split at commas and trimmed; the filter shown, whole, while the box
// still holds what the page put there (a tag followed by its link may
// hold a comma or edge spaces).
function typed(id, key) {
  const box = $(id);
  if (box.value === box.dataset.shown) return logState[key];
  return box.value.split(",").map((x) => x.trim()).filter(Boolean);
}

// showLogOf shows the log as the parameters say (view, from, before,
// types, tags).
function showLogOf(p) {
  readLogParams(p);
  $("log-view").value = logState.view;
  $("log-from").value = String(logState.from);
  $("log-from").disabled = logState.view === "newest";
  for (const [id, key] of [["log-types", "types"], ["log-tags", "tags"]]) {
    $(id).value = $(id).dataset.shown = logState[key].join(", ");
  }
  pages.length = 0;
  loadLog(logStart());
}

// ---- Live tail -----------------------------------------------------------

// epoch is the epoch of the tail's first start message: a resumed tail
// sends it back with its position, so that a boundary reset while paused
// ends the tail, saying so, instead of following another epoch's
// positions.
// resumable: a started tail lost its connection; Follow goes on after the
// last event shown, in its epoch, so that nothing is skipped unseen.
const tail = { es: null, paused: false, held: [], last: 0, shown: 0, epoch: "", resumable: false };
const tailMax = 200;   // events kept on the page
const heldMax = 1000;  // events held while paused; beyond, the tail closes and resumes from the last shown

function tailState(text) { $("tail-state").textContent = text; }

function showTail(e) {
  const list = $("tail");
  list.prepend(renderEvent(e));
  while (list.children.length > tailMax) list.lastChild.remove();
  openFirst(list);
  tail.last = e.position;
  tail.shown++;
}

function openTail(after) {
  const p = filterParams(new URLSearchParams());
  if (after !== undefined) {
    p.set("after", String(after));
    if (tail.epoch) p.set("epoch", tail.epoch);
  }
  const es = new EventSource("/console/events/" + encodeURIComponent(name) + "/tail?" + p.toString());
  tail.es = es;
  es.addEventListener("start", (m) => { es.started = true; const d = JSON.parse(m.data); tail.last = d.after; if (!tail.epoch) tail.epoch = d.epoch; tailState("catching up after position " + num.format(d.after) + "…"); });
  es.addEventListener("live", (m) => { tailState("live from position " + num.format(JSON.parse(m.data).next)); });
  es.addEventListener("behind", (m) => { const d = JSON.parse(m.data); tailState("catching up from the store at " + num.format(d.next) + ": " + d.reason); });
  es.addEventListener("event", (m) => {
    const e = JSON.parse(m.data);
    if (tail.paused) {
      tail.held.push(e);
      if (tail.held.length >= heldMax) { closeTail(); }
      tailState("paused · " + num.format(tail.held.length) + " new");
      return;
    }
    showTail(e);
  });
  es.addEventListener("end", (m) => {
    tail.resumable = false;
    const reason = JSON.parse(m.data).reason;
    tailState(reason.includes("epoch changed") ? "ended: the boundary was reset (a new epoch) since the events shown; " +
      "they are not in its log any more · Follow starts again from now (" + reason + ")" : "ended: " + reason);
    closeTail();
  });
  es.onerror = () => {
    // The node went away or restarted: EventSource would reconnect to
    // "from now" and skip events; close and offer to follow again.
    // Refused before its start (EventSource does not show the answer):
    // most likely the node's cap of live tails (16) is reached.
    if (es.readyState !== EventSource.CLOSED || tail.es === es) {
      const started = es.started;
      tail.resumable = started;
      closeTail();
      tailState(started ? "disconnected · Follow goes on after position " + num.format(tail.last) :
        "could not follow: the node did not answer, or serves its most live tails (16) already; close other tails and follow again");
    }
  };
  $("tail-start").hidden = true;
  $("tail-pause").hidden = false;
  $("tail-stop").hidden = false;
}

function closeTail() {
  if (tail.es) { tail.es.close(); tail.es = null; }
  if (!tail.paused) { $("tail-start").hidden = false; $("tail-pause").hidden = true; $("tail-stop").hidden = true; }
}

function setupTail() {
  $("tail-controls").hidden = false;
  $("tail-start").onclick = () => {
    tail.paused = false;
    tail.held = [];
    if (tail.resumable) {
      // After a lost connection: after the last shown, in its epoch.
      tail.resumable = false;
      openTail(tail.last);
      return;
    }
    // From now: what the list shows is another run's, so it goes, and
    // no gap hides between the two.
    $("tail").replaceChildren();
    tail.epoch = "";
    openTail();
  };
  $("tail-pause").onclick = () => {
    if (!tail.paused) {
      tail.paused = true;
      $("tail-pause").textContent = "Resume";
      tailState("paused");
      return;
    }
    tail.paused = false;
    $("tail-pause").textContent = "Pause";
    const held = tail.held;
    tail.held = [];
    for (const e of held) showTail(e);
    if (!tail.es) openTail(tail.last); // closed while paused: go on after the last shown, nothing skipped
    else tailState("live");
  };
  $("tail-stop").onclick = () => { tail.paused = false; tail.resumable = false; $("tail-pause").textContent = "Pause"; tail.held = []; closeTail(); tailState("stopped"); };
}

// ---- Start ---------------------------------------------------------------

async function start() {
  if (name === null) {
    $("name").textContent = "?";
    $("banner").hidden = false;
    $("banner").textContent = "This address does not name a boundary: " + location.pathname +
      " is not a valid URL encoding (a % not followed by the UTF-8 of a character). Open the boundary from the overview.";
    return;
  }
  $("name").textContent = name;
  document.title = "orisun console · " + name;
  $("history-link").href = "/console/history/" + encodeURIComponent(name);
  const a = await access();
  if (a.events === "ok") {
    setupTail();
    setupLog();
  } else {
    gate($("tail-gate"), a);
    gate($("log-gate"), a);
  }
  pollStatus();
  await pollHistory();
  setInterval(pollHistory, 1000);
  setInterval(pollStatus, 2000);
  window.addEventListener("resize", drawAll);
}

window.addEventListener("pagehide", () => { if (tail.es) tail.es.close(); });
start();
