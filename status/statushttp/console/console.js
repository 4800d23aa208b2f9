// orisun console: the overview. It polls /status once a second (one
// request in flight at most, none while the tab is hidden, slower when the
// node answers slowly) and redraws the table; docs/console.md says why
// polling and not server-sent events.
"use strict";

const refreshMs = 1000;
const $ = (id) => document.getElementById(id);

// el makes an element with text (never HTML: names and reasons are data).
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

const num = new Intl.NumberFormat("en-US");
const secs = new Intl.NumberFormat("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}
function ago(iso, now) {
  if (!iso) return "";
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 120) return s + " s ago";
  if (s < 7200) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

// rank puts what needs an operator first: stalled, paused, unmeasured or
// warned, then the rest, each by name. Not by lag: a lag that comes and
// goes every second would make the rows jump under the reader's eye (the
// lag column and the row's colour show it).
function rank(b) {
  if (b.state === "stalled") return 0;
  if (b.state === "paused") return 1;
  if (b.error || b.stream_error || b.warning) return 2;
  return 3;
}

// stagedText says what waits in a boundary's outbox staging
// (docs/outbox.md): committed enqueued events not yet moved into the log
// keep the node unsettled, the mover's error says why they wait, and
// set-aside events wait for an operator. "" when there is nothing.
function stagedText(b) {
  const parts = [];
  if (b.staged) parts.push(num.format(b.staged) + " enqueued events staged, not yet in the log (oldest enqueued " + secs.format(b.staged_seconds || 0) + " s ago)");
  if (b.move_error) parts.push("the mover fails: " + b.move_error);
  if (b.set_aside) parts.push(num.format(b.set_aside) + " enqueued events set aside: " + b.set_aside_reason);
  return parts.join(" · ");
}

// shown says whether the filter box lets a boundary's row show: every
// word typed is in its name, state, reason, errors or lease holder.
function shown(b, words) {
  if (words.length === 0) return true;
  const text = [b.name, b.state, b.reason, b.error, b.stream_error, b.warning, stagedText(b), b.lease_holder].filter(Boolean).join(" ").toLowerCase();
  return words.every((w) => text.includes(w));
}
function filterWords() { return $("filter").value.toLowerCase().split(/\s+/).filter(Boolean); }
let lastStatus = null;

function health(name, h) {
  const p = el("span", "pill " + (h.ok ? "ok" : "bad"), name + (h.kind ? " (" + h.kind + ")" : "") + ": " + (h.ok ? "ok" : "failing"));
  p.dataset.health = name;
  if (!h.ok && h.error) p.title = h.error;
  return p;
}

function cell(row, label, cls, text) {
  const td = el("td", cls, text);
  td.dataset.label = label;
  row.appendChild(td);
  return td;
}

function render(st) {
  const now = Date.parse(st.time) || Date.now();
  $("node").textContent = "node " + st.node_id + (st.version ? " · " + st.version : "");
  const hl = $("health");
  hl.replaceChildren(
    health("store", st.store),
    health("NATS", st.nats),
    el("span", "pill " + (st.settled ? "ok" : "bad"), st.settled ? "settled" : "not settled"),
  );
  const problems = [];
  if (!st.store.ok) problems.push("store: " + st.store.error + (st.store.since ? " (since " + st.store.since + ")" : ""));
  if (!st.nats.ok) problems.push("NATS: " + st.nats.error);
  const warn = $("warning");
  const texts = problems.slice();
  if (st.warning) texts.push(st.warning);
  warn.hidden = texts.length === 0;
  warn.textContent = texts.join(" · ");

  const bs = (st.boundaries || []).slice().sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
  const counts = { leading: 0, standby: 0, paused: 0, stalled: 0 };
  let lag = 0;
  for (const b of bs) { counts[b.state] = (counts[b.state] || 0) + 1; lag += b.lag_events; }
  let summary = bs.length + " boundaries · " + counts.leading + " leading · " + counts.standby + " standby · " +
    counts.paused + " paused · " + counts.stalled + " stalled · lag " + num.format(lag) + " events";
  if (st.placement) summary += " · " + st.placement.live_nodes + " live nodes, fair share " + st.placement.fair_share;
  const words = filterWords();
  const visible = bs.filter((b) => shown(b, words));
  if (words.length) summary += " · " + visible.length + " shown";
  $("summary").textContent = summary;
  $("empty").hidden = bs.length !== 0;
  $("no-match").hidden = bs.length === 0 || visible.length !== 0;

  const rows = visible.map((b) => {
    const tr = el("tr", b.state);
    tr.dataset.boundary = b.name;
    if (b.error || b.stream_error) tr.classList.add("error");
    const name = cell(tr, "boundary", "name", "");
    const link = el("a", "", b.name);
    link.href = "/console/boundary/" + encodeURIComponent(b.name);
    name.appendChild(link);
    name.appendChild(el("span", "sub", "epoch " + b.epoch));
    const state = cell(tr, "state", "state", b.state);
    if (b.since) state.appendChild(el("span", "sub", "since " + ago(b.since, now)));
    for (const r of [b.reason, b.error, b.stream_error, b.warning, stagedText(b)]) {
      if (r) state.appendChild(el("span", "reason", r));
    }
    cell(tr, "head", "num head", num.format(b.head));
    cell(tr, "published", "num published", num.format(b.published));
    cell(tr, "lag", "num lag", num.format(b.lag_events));
    cell(tr, "lag s", "num lag-seconds", secs.format(b.lag_seconds));
    const lease = cell(tr, "lease", "lease", b.lease_holder ? b.lease_holder + (b.lease_holder === st.lease_holder ? " (this node)" : "") : "none");
    if (b.lease_holder) lease.appendChild(el("span", "sub", "term " + b.lease_term));
    cell(tr, "stream", "num stream", b.stream_last ? num.format(b.stream_first) + "–" + num.format(b.stream_last) : "empty");
    cell(tr, "bytes", "num bytes", bytes(b.stream_bytes));
    const subs = cell(tr, "subscriptions", "num subs", num.format(b.subscriptions_live) + " live");
    if (b.subscriptions_catching_up) subs.appendChild(el("span", "sub", num.format(b.subscriptions_catching_up) + " catching up"));
    if (b.subscription_fall_backs) subs.appendChild(el("span", "sub", num.format(b.subscription_fall_backs) + " fall-backs"));
    return tr;
  });
  document.querySelector("#boundaries tbody").replaceChildren(...rows);
}

let lastOK = 0;
let busy = false;
async function poll() {
  if (busy) return;
  busy = true;
  const banner = $("banner");
  try {
    const resp = await fetch("/status", { cache: "no-store" });
    const body = await resp.json();
    if (!resp.ok) throw new Error(body.error || resp.status + " " + resp.statusText);
    lastStatus = body;
    render(body);
    lastOK = Date.now();
    banner.hidden = true;
    document.body.classList.remove("stale");
    $("updated").textContent = "updated " + new Date(lastOK).toLocaleTimeString();
  } catch (e) {
    banner.hidden = false;
    banner.textContent = "The node does not answer: " + e.message +
      (lastOK ? " · last answer " + new Date(lastOK).toLocaleTimeString() : "");
    document.body.classList.add("stale");
  } finally {
    busy = false;
  }
}

// loop polls once a second, or twice as long as the last answer took: a
// node whose measurement is slow (many boundaries, a struggling store) is
// never asked faster than it answers.
async function loop() {
  let next = refreshMs;
  if (!document.hidden) {
    const start = performance.now();
    await poll();
    next = Math.max(refreshMs, 2 * (performance.now() - start));
  }
  setTimeout(loop, next);
}

async function access() {
  try {
    const a = await (await fetch("/console/access", { cache: "no-store" })).json();
    const words = { open: "event pages: open (loopback listener, no NATS credentials)", login: "event pages: need the console's login",
      off: "event pages: off (" + a.why + "); " + a.how };
    $("access").textContent = words[a.events] || "";
  } catch (e) {
    $("access").textContent = "";
  }
}

document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
// The filter box: kept in the address (?q=…) so that a filtered overview
// can be bookmarked; applied at once to the last answer.
$("filter").value = new URLSearchParams(location.search).get("q") || "";
$("filter").addEventListener("input", () => {
  const q = $("filter").value;
  history.replaceState(null, "", q ? "?q=" + encodeURIComponent(q) : location.pathname);
  if (lastStatus) render(lastStatus);
});
access();
loop();
