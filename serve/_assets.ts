/**
 * The web view's page, script and style, as string constants: they ship in
 * the package (npm and by URL in Deno) and are served without reading a file
 * or reaching a network. No framework: the script builds the page with DOM
 * calls and puts every value in with `textContent` or `setAttribute`, never
 * as HTML. The script's list of statuses is made from the API's, so the two
 * never drift.
 *
 * @module
 */
import { SHOWN_STATUSES } from "./_api.ts";

/** The page (`GET /`): a frame the script fills. */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agent-checkpoint: runs</title>
<link rel="stylesheet" href="/app.css">
<script src="/app.js" defer></script>
</head>
<body>
<header>
  <h1>agent-checkpoint <span class="sub">runs</span></h1>
  <span id="store"></span>
  <span id="updated" aria-live="polite"></span>
</header>
<form id="filters" autocomplete="off">
  <fieldset id="status-filter"><legend>Status</legend></fieldset>
  <label>Host <select id="host"><option value="">all hosts</option></select></label>
  <label>Updated <select id="since">
    <option value="">any time</option>
    <option value="15m">last 15 minutes</option>
    <option value="1h">last hour</option>
    <option value="6h">last 6 hours</option>
    <option value="24h">last 24 hours</option>
    <option value="7d">last 7 days</option>
  </select></label>
</form>
<div id="error" role="alert" hidden></div>
<main>
  <section id="list" aria-label="Runs">
    <div class="row head"><div>Run</div><div id="axis"></div><div>Use of each cap</div></div>
    <div id="rows" role="list"></div>
    <p id="shown"></p>
  </section>
  <aside id="detail" hidden aria-label="Run detail">
    <button type="button" id="close" aria-label="Close">&times;</button>
    <h2 id="d-title"></h2>
    <p id="d-stopped"></p>
    <div id="d-caps"></div>
    <div id="d-tree-box" hidden>
      <h3>Tree of runs sharing one budget</h3>
      <dl id="d-tree"></dl>
    </div>
    <h3>Record</h3>
    <dl id="d-record"></dl>
    <h3>Recent tool calls</h3>
    <table id="d-tools"></table>
    <h3>Attempts</h3>
    <table id="d-attempts"></table>
    <h3 id="d-effects-title" hidden>Side effects</h3>
    <table id="d-effects"></table>
    <h3>Checkpoint file</h3>
    <p id="d-file-note"></p>
    <pre id="d-file"></pre>
    <details><summary>Record as JSON</summary><pre id="d-json"></pre></details>
  </aside>
</main>
<footer id="legend"></footer>
</body>
</html>
`;

/** The page's style (`GET /app.css`). */
export const APP_CSS = String.raw`
:root {
  --live: #2f7de1; --done: #2e9e5b; --capped: #d99a1e; --failed: #d6453d;
  --aborted: #8a8f98; --deadline: #8e5bd0; --cut-off: #b3261e;
  --bg: #fbfbfc; --fg: #1d2330; --muted: #687083; --line: #e3e6ec; --panel: #fff;
  font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg); }
header { display: flex; gap: 16px; align-items: baseline; padding: 10px 16px; border-bottom: 1px solid var(--line); background: var(--panel); }
h1 { font-size: 16px; margin: 0; }
h1 .sub { font-weight: 400; color: var(--muted); }
#store, #updated { color: var(--muted); }
#updated { margin-left: auto; }
#filters { display: flex; flex-wrap: wrap; gap: 16px; align-items: center; padding: 8px 16px; border-bottom: 1px solid var(--line); }
#filters fieldset { border: 0; margin: 0; padding: 0; display: flex; gap: 10px; align-items: center; }
#filters legend { float: left; margin-right: 6px; color: var(--muted); }
#filters label { white-space: nowrap; }
#error { margin: 8px 16px; padding: 8px; border: 1px solid var(--failed); color: var(--failed); background: #fff4f3; }
main { display: flex; align-items: flex-start; }
#list { flex: 1; min-width: 0; padding: 4px 16px 16px; }
.row { display: grid; grid-template-columns: 250px 1fr 270px; gap: 12px; align-items: center; padding: 3px 4px; border-bottom: 1px solid var(--line); cursor: pointer; }
.row.head { cursor: default; color: var(--muted); font-size: 12px; position: sticky; top: 0; background: var(--bg); z-index: 1; }
.row:not(.head):hover { background: #f0f3f8; }
.row.selected { background: #e6eefb; }
.label { min-width: 0; }
.rid { display: block; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.meta { display: block; color: var(--muted); font-size: 11px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.inflight { display: block; color: var(--muted); font-size: 11px; overflow-wrap: anywhere; }
.dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 6px; vertical-align: 0; }
#axis { position: relative; height: 16px; }
#axis span { position: absolute; transform: translateX(-50%); white-space: nowrap; font-size: 11px; }
#axis span:first-child { transform: none; }
#axis span:last-child { transform: translateX(-100%); }
.lane { position: relative; height: 18px; background: #f2f4f7; border-radius: 2px; }
.bar { position: absolute; top: 4px; height: 10px; min-width: 2px; border-radius: 2px; }
.mark { position: absolute; top: 0; width: 0; height: 18px; }
.mark.tier::before { content: ""; position: absolute; left: -4px; top: 5px; width: 8px; height: 8px; background: #fff; border: 2px solid var(--fg); transform: rotate(45deg); }
.mark.tier.estimated::before { border-style: dotted; }
.mark.checkpoint { border-left: 2px solid var(--fg); }
.mark.end::before { content: ""; position: absolute; left: -1px; top: 2px; width: 2px; height: 14px; background: var(--fg); opacity: .45; }
.bar.earlier { top: 6px; height: 6px; opacity: .8; }
.mark.attempt::before { content: ""; position: absolute; left: -3px; top: 3px; width: 4px; height: 12px; background: var(--cut-off); border: 1px solid #fff; border-radius: 1px; }
.mark.attempt.ended::before { background: var(--fg); }
.caps { display: flex; flex-direction: column; gap: 2px; }
.cap { display: grid; grid-template-columns: 38px 1fr 112px; gap: 6px; align-items: center; font-size: 11px; color: var(--muted); }
.meter { position: relative; height: 7px; background: var(--line); border-radius: 3px; overflow: hidden; }
.fill { position: absolute; left: 0; top: 0; bottom: 0; }
.num { white-space: nowrap; }
.tick { position: absolute; top: 0; bottom: 0; width: 1px; background: var(--fg); opacity: .7; }
.s-live { background: var(--live); } .s-done { background: var(--done); } .s-capped { background: var(--capped); }
.s-failed { background: var(--failed); } .s-aborted { background: var(--aborted); } .s-deadline { background: var(--deadline); }
.s-cut-off { background: repeating-linear-gradient(135deg, var(--cut-off) 0 4px, #e07a73 4px 8px); }
.bar.s-live { animation: pulse 2s ease-in-out infinite; }
@keyframes pulse { 50% { opacity: .65; } }
#shown { color: var(--muted); }
#detail { width: 40%; max-width: 600px; min-width: 340px; position: sticky; top: 0; max-height: 100vh; overflow: auto; background: var(--panel); border-left: 1px solid var(--line); padding: 12px 16px 24px; }
#detail h2 { font-size: 15px; margin: 0 28px 6px 0; word-break: break-all; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
#detail h3 { font-size: 13px; margin: 16px 0 6px; }
#close { position: absolute; right: 10px; top: 8px; border: 0; background: none; font-size: 20px; cursor: pointer; color: var(--muted); }
#d-stopped { font-weight: 600; }
#d-stopped.cut-off { color: var(--cut-off); }
#d-caps .cap { grid-template-columns: 48px 1fr 120px; font-size: 12px; margin: 3px 0; }
#d-caps .meter { height: 10px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; }
dt { color: var(--muted); } dd { margin: 0; word-break: break-word; white-space: pre-wrap; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
th, td { text-align: left; padding: 2px 6px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 500; }
pre { white-space: pre-wrap; word-break: break-word; background: #f5f6f8; border: 1px solid var(--line); padding: 8px; max-height: 60vh; overflow: auto; font-size: 12px; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; color: #fff; font-size: 11px; font-family: system-ui, sans-serif; vertical-align: 2px; margin-left: 6px; }
footer { padding: 8px 16px; color: var(--muted); display: flex; flex-wrap: wrap; gap: 14px; border-top: 1px solid var(--line); }
footer .key { display: inline-flex; align-items: center; gap: 4px; }
footer .swatch { display: inline-block; width: 14px; height: 8px; border-radius: 2px; }
footer .mark { position: relative; display: inline-block; width: 10px; height: 14px; }
`;

/** The page's script (`GET /app.js`): fetches the API every two seconds and draws it. */
export const APP_JS = String.raw`"use strict";
(function () {
  var STATUSES = ${JSON.stringify(SHOWN_STATUSES)};
  var LABELS = { "cut-off": "cut off" };
  var POLL_MS = 2000;
  var state = { status: STATUSES.slice(), host: "", since: "", selected: "", runs: null, timer: 0 };

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function statusClass(s) { return STATUSES.indexOf(s) >= 0 ? "s-" + s : "s-aborted"; }
  function label(s) { return LABELS[s] || s; }
  function pad(n) { return n < 10 ? "0" + n : String(n); }
  function clock(ms) {
    var d = new Date(ms);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function when(ms) {
    var d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + clock(ms);
  }
  function duration(seconds) {
    var s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + pad(s % 60) + "s";
    return Math.floor(s / 3600) + "h" + pad(Math.floor((s % 3600) / 60)) + "m";
  }
  function amount(axis, v) {
    if (axis === "time") return duration(v);
    if (axis === "usd") return "$" + v.toFixed(2);
    return String(Math.round(v * 100) / 100);
  }
  function pct(x) { return Math.max(0, Math.min(100, x * 100)) + "%"; }

  function readHash() {
    var p = new URLSearchParams(location.hash.slice(1));
    var s = p.get("status");
    if (s) {
      var list = s.split(",").filter(function (x) { return STATUSES.indexOf(x) >= 0; });
      if (list.length) state.status = list;
    }
    state.host = p.get("host") || "";
    state.since = p.get("since") || "";
    state.selected = p.get("run") || "";
  }
  function writeHash() {
    var p = new URLSearchParams();
    if (state.status.length !== STATUSES.length) p.set("status", state.status.join(","));
    if (state.host) p.set("host", state.host);
    if (state.since) p.set("since", state.since);
    if (state.selected) p.set("run", state.selected);
    var h = p.toString();
    history.replaceState(null, "", h ? "#" + h : location.pathname);
  }
  function query() {
    var p = new URLSearchParams();
    if (state.status.length && state.status.length !== STATUSES.length) p.set("status", state.status.join(","));
    if (state.host) p.set("host", state.host);
    if (state.since) p.set("since", state.since);
    return p.toString();
  }

  function buildFilters() {
    var box = $("status-filter");
    STATUSES.forEach(function (s) {
      var l = el("label");
      var c = el("input");
      c.type = "checkbox";
      c.value = s;
      c.checked = state.status.indexOf(s) >= 0;
      c.addEventListener("change", function () {
        state.status = STATUSES.filter(function (x) {
          var i = box.querySelector("input[value='" + x + "']");
          return i && i.checked;
        });
        changed();
      });
      l.appendChild(c);
      l.appendChild(el("span", "dot " + statusClass(s)));
      l.appendChild(el("span", "", label(s)));
      l.appendChild(el("span", "count", ""));
      l.setAttribute("data-status", s);
      box.appendChild(l);
    });
    $("since").value = state.since;
    $("since").addEventListener("change", function () { state.since = this.value; changed(); });
    $("host").addEventListener("change", function () { state.host = this.value; changed(); });
    $("close").addEventListener("click", function () { select(""); });
    var legend = $("legend");
    STATUSES.forEach(function (s) {
      var k = el("span", "key");
      k.appendChild(el("span", "swatch " + statusClass(s)));
      k.appendChild(document.createTextNode(label(s)));
      legend.appendChild(k);
    });
    [["mark tier", "tier reached"], ["mark tier estimated", "tier reached (time estimated from turns)"],
      ["mark checkpoint", "checkpoint file written (last)"], ["mark end", "end"],
      ["mark attempt", "an earlier attempt cut off"], ["mark attempt ended", "an earlier attempt ended"]].forEach(function (m) {
      var k = el("span", "key");
      k.appendChild(el("span", m[0]));
      k.appendChild(document.createTextNode(m[1]));
      legend.appendChild(k);
    });
    legend.appendChild(el("span", "key", "cap bars: use against the cap; ticks at the tier fractions"));
  }
  function changed() {
    writeHash();
    poll();
  }

  function drawCounts(data) {
    document.querySelectorAll("#status-filter label").forEach(function (l) {
      var s = l.getAttribute("data-status");
      l.querySelector(".count").textContent = " " + (data.counts[s] || 0) +
        (s === "cut-off" && data.earlierCutOff ? " (+" + data.earlierCutOff + " earlier attempts)" : "");
    });
    var sel = $("host");
    var hosts = Object.keys(data.hosts).sort();
    if (state.host && hosts.indexOf(state.host) < 0) hosts.unshift(state.host);
    var want = [""].concat(hosts).join("\n");
    var have = Array.prototype.map.call(sel.options, function (o) { return o.value; }).join("\n");
    if (want !== have) {
      sel.replaceChildren(el("option", "", "all hosts"));
      sel.options[0].value = "";
      hosts.forEach(function (h) {
        var o = el("option", "", h + " (" + (data.hosts[h] || 0) + ")");
        o.value = h;
        sel.appendChild(o);
      });
    }
    sel.value = state.host;
  }

  function capBars(caps, cls) {
    var box = el("div", cls);
    caps.forEach(function (c) {
      var row = el("div", "cap");
      var f = c.cap > 0 ? c.used / c.cap : 0;
      row.setAttribute("title", c.axis + ": " + amount(c.axis, c.used) + " of " + amount(c.axis, c.cap) +
        " (" + c.source + "); tiers at " + c.tiers.map(function (t) { return Math.round(t * 100) + "%"; }).join(", "));
      row.appendChild(el("span", "axis", c.axis));
      var m = el("div", "meter");
      var fill = el("div", "fill " + (f >= 1 ? "s-failed" : f >= (c.tiers[c.tiers.length - 1] || 1) ? "s-capped" : "s-live"));
      fill.style.width = pct(f);
      m.appendChild(fill);
      c.tiers.forEach(function (t) {
        var tick = el("div", "tick");
        tick.style.left = pct(t);
        m.appendChild(tick);
      });
      row.appendChild(m);
      row.appendChild(el("span", "num", amount(c.axis, c.used) + " / " + amount(c.axis, c.cap)));
      box.appendChild(row);
    });
    return box;
  }

  function drawAxis(t0, t1) {
    var axis = $("axis");
    axis.replaceChildren();
    var n = Math.max(1, Math.min(4, Math.floor(axis.clientWidth / 110)));
    for (var i = 0; i <= n; i++) {
      var t = t0 + ((t1 - t0) * i) / n;
      var s = el("span", "", t1 - t0 > 86400000 ? when(t).slice(5, 16) : clock(t));
      s.style.left = (i * 100 / n) + "%";
      axis.appendChild(s);
    }
  }

  function drawRuns(data) {
    var runs = state.status.length ? data.runs : [];
    var now = data.now;
    var first = now;
    runs.forEach(function (r) {
      (r.attempts || []).forEach(function (a) { if (a.startedAt < first) first = a.startedAt; });
      if (r.startedAt < first) first = r.startedAt;
    });
    // A little room before the first start, and at least ten seconds across.
    var t0 = first - Math.max(1000, (now - first) * 0.02);
    if (now - t0 < 10000) t0 = now - 10000;
    var span = now - t0;
    var at = function (ms) { return pct((ms - t0) / span); };
    drawAxis(t0, now);
    var frag = document.createDocumentFragment();
    runs.forEach(function (r) {
      var row = el("div", "row" + (r.runId === state.selected ? " selected" : ""));
      row.setAttribute("role", "listitem");
      row.setAttribute("data-run", r.runId);
      row.setAttribute("data-status", r.status);
      var lab = el("div", "label");
      var id = el("span", "rid");
      id.appendChild(el("span", "dot " + statusClass(r.status)));
      id.appendChild(document.createTextNode(r.runId));
      id.setAttribute("title", r.runId);
      lab.appendChild(id);
      var earlier = (r.attempts || []).slice(0, -1);
      var cut = earlier.filter(function (a) { return a.status === "cut-off"; }).length;
      // Each tool in flight by its full name and how long the call has run (from its last record).
      var calls = r.inFlight.map(function (c) {
        return c.tool + " " + duration(((r.endAt === undefined ? now : r.endAt) - c.startedAt) / 1000);
      });
      var meta = label(r.status) + " · " + r.machine +
        (r.attempt > 1 ? " · attempt " + r.attempt + (cut ? " (" + cut + " cut off before)" : "") : "") +
        " · " + r.turnsUsed + " turns · " + duration(r.elapsedSeconds) + (r.tier ? " · tier " + r.tier : "") +
        (r.parent !== undefined ? " · child of " + r.parent : r.treeRoot !== undefined ? " · tree root" : "");
      var metaEl = el("span", "meta", meta);
      metaEl.setAttribute("title", meta + (r.inFlight.length ? "\n" + r.inFlight.map(function (c) {
        return "in flight: " + c.tool + (c.callId ? " (call id " + c.callId + ")" : "") + " since " + when(c.startedAt);
      }).join("\n") : ""));
      lab.appendChild(metaEl);
      // On a line of its own that wraps: a long tool name is never cut.
      if (calls.length) lab.appendChild(el("span", "inflight", "in " + calls.join(", ")));
      row.appendChild(lab);
      var lane = el("div", "lane");
      var end = r.endAt === undefined ? now : r.endAt;
      var bar = el("div", "bar " + statusClass(r.status));
      bar.style.left = at(r.startedAt);
      bar.style.width = pct((end - r.startedAt) / span);
      bar.setAttribute("title", label(r.status) + ": " + when(r.startedAt) + " to " + (r.endAt === undefined ? "now" : when(r.endAt)));
      // The earlier attempts: each a thin stretch of the bar, and a mark where it ended.
      earlier.forEach(function (a) {
        var stop = a.endAt === undefined ? now : a.endAt;
        var seg = el("div", "bar earlier " + statusClass(a.status));
        seg.style.left = at(a.startedAt);
        seg.style.width = pct((stop - a.startedAt) / span);
        lane.appendChild(seg);
        var mk = el("div", "mark attempt" + (a.status === "cut-off" ? "" : " ended"));
        mk.setAttribute("data-attempt", String(a.attempt));
        mk.style.left = at(stop);
        mk.setAttribute("title", "attempt " + a.attempt + " " + (a.status === "cut-off" ? "cut off" : a.status === "live" ? "still live" : "ended " + label(a.status)) +
          " at " + when(stop));
        lane.appendChild(mk);
      });
      lane.appendChild(bar);
      r.marks.forEach(function (m) {
        var mk = el("div", "mark " + (m.kind === "tier" ? "tier" : m.kind === "checkpoint" ? "checkpoint" : "end") + (m.estimated ? " estimated" : ""));
        mk.style.left = at(m.at);
        mk.setAttribute("title", (m.kind === "tier" ? "tier " + m.tier + (m.estimated ? " (time estimated)" : "") : m.kind === "checkpoint" ? "checkpoint file written" : "ended") + " at " + when(m.at));
        lane.appendChild(mk);
      });
      row.appendChild(lane);
      row.appendChild(capBars(r.caps, "caps"));
      row.addEventListener("click", function () { select(r.runId); });
      frag.appendChild(row);
    });
    $("rows").replaceChildren(frag);
    var shown = runs.length + " of " + data.total + " runs shown, the most recently updated first";
    if (data.total > runs.length) shown += " (narrow the filters to see others)";
    if (data.scanLimited) shown += "; only the newest " + data.scanLimited + " ended runs were searched for their end status";
    $("shown").textContent = shown;
  }

  function dlRow(dl, k, v) {
    if (v === undefined || v === null || v === "") return;
    dl.appendChild(el("dt", "", k));
    dl.appendChild(el("dd", "", v));
  }
  function tableOf(t, head, rows) {
    t.replaceChildren();
    var tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", "", h)); });
    t.appendChild(tr);
    rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (c) { row.appendChild(el("td", "", c)); });
      t.appendChild(row);
    });
  }

  function drawDetail(d) {
    var r = d.record;
    var run = d.run;
    $("detail").hidden = false;
    var title = $("d-title");
    title.replaceChildren(document.createTextNode(r.runId));
    title.appendChild(el("span", "badge " + statusClass(run.status), label(run.status)));
    var stopped = $("d-stopped");
    stopped.textContent = (run.status === "cut-off" ? "Where it stopped: " : run.status === "live" ? "Now: " : "Ended: ") + d.stopped;
    stopped.className = run.status === "cut-off" ? "cut-off" : "";
    $("d-caps").replaceChildren(capBars(run.caps, ""));
    // Its tree: the root, its parent, its children (each opens its own detail), the tree's totals.
    var t = d.tree;
    $("d-tree-box").hidden = !t;
    var tdl = $("d-tree");
    tdl.replaceChildren();
    if (t) {
      dlRow(tdl, "root", t.root === r.runId ? t.root + " (this run)" : t.root);
      dlRow(tdl, "parent", run.parent);
      if (t.children.length) {
        tdl.appendChild(el("dt", "", "children"));
        var dd = el("dd", "tree-children");
        t.children.forEach(function (c, i) {
          if (i) dd.appendChild(document.createTextNode(", "));
          var a = el("a", "", c.runId);
          a.href = "#";
          a.setAttribute("data-run", c.runId);
          a.addEventListener("click", function (e) { e.preventDefault(); select(c.runId); });
          dd.appendChild(a);
          dd.appendChild(document.createTextNode(" (" + label(c.status) + ")"));
        });
        tdl.appendChild(dd);
      }
      dlRow(tdl, "totals", t.text);
    }
    var dl = $("d-record");
    dl.replaceChildren();
    dlRow(dl, "attempt", String(r.attempt));
    dlRow(dl, "dialect", r.dialect);
    dlRow(dl, "task", r.taskId);
    dlRow(dl, "status", r.status + (run.status === "cut-off" ? " (its process is gone: cut off)" : ""));
    dlRow(dl, "host", r.host.machine + ", pid " + r.host.pid);
    dlRow(dl, "started", when(r.startedAt));
    dlRow(dl, "last record", when(r.updatedAt));
    if (d.heartbeat) dlRow(dl, "last heartbeat", when(d.heartbeat.at));
    if (r.end) dlRow(dl, "ended", when(r.end.at) + " " + r.end.status + (r.end.summary ? ": " + r.end.summary : ""));
    dlRow(dl, "turns used", String(r.turnsUsed));
    dlRow(dl, "elapsed", duration(run.elapsedSeconds));
    dlRow(dl, "tier", String(r.tier));
    Object.keys(r.caps || {}).forEach(function (k) {
      var c = r.caps[k];
      if (c && typeof c.value === "number") dlRow(dl, "cap " + k, amount(k, c.value) + " (" + c.source + ")");
    });
    dlRow(dl, "in flight", r.inFlight.map(function (c) {
      return c.tool + (c.callId ? " (call " + c.callId + ")" : "") + " since " + when(c.startedAt);
    }).join("\n"));
    dlRow(dl, "notes", (r.notes || []).join("\n"));
    dlRow(dl, "earlier attempts", (r.attempts || []).join("\n"));
    dlRow(dl, "checkpoint file", r.checkpointFile);
    tableOf($("d-tools"), ["tool", "call", "status", "started", "took"], (r.recent || []).map(function (c) {
      return [c.tool, c.callId || "", c.status + (c.error ? ": " + c.error : ""), "+" + duration(c.startedAt),
        c.durationMs === undefined ? "" : (c.durationMs / 1000).toFixed(1) + "s"];
    }));
    tableOf($("d-attempts"), ["#", "status", "where it got to", "host", "started"], d.attempts.map(function (a) {
      return [String(a.attempt), label(a.status), a.summary, a.machine + " pid " + a.pid, when(a.startedAt)];
    }));
    var effects = d.effects || [];
    $("d-effects-title").hidden = effects.length === 0;
    $("d-effects").hidden = effects.length === 0;
    $("d-effects-title").textContent = "Side effects" + (d.effectsTotal > effects.length ? " (the first " + effects.length + " of " + d.effectsTotal + ")" : "");
    tableOf($("d-effects"), ["tool", "effect key", "outcome", "attempt", "result"], effects.map(function (e) {
      var rc = e.receipt;
      return [e.tool, e.key, rc ? (rc.ok ? "done" : "done, failed") : "outcome unknown",
        String(rc ? rc.attempt : e.attempt), rc && rc.result !== undefined ? rc.result.slice(0, 120) + (rc.truncated ? " (cut)" : "") : ""];
    }));
    var f = d.file;
    var note = f.source === "file" ? "From " + f.path : f.source === "store" ? "The store's copy" + (f.path ? " (" + f.path + ": " + (f.note || "not readable here") + ")" : "") : "No checkpoint file" + (f.path ? ": " + f.path + (f.note ? ", " + f.note : "") : "");
    if (f.truncated) note += " (cut to its first " + f.content.length + " characters)";
    $("d-file-note").textContent = note;
    var pre = $("d-file");
    pre.hidden = f.content === undefined;
    pre.textContent = f.content === undefined ? "" : f.content;
    $("d-json").textContent = JSON.stringify(r, null, 2);
  }

  function select(runId) {
    state.selected = runId;
    writeHash();
    document.querySelectorAll(".row.selected").forEach(function (r) { r.classList.remove("selected"); });
    if (!runId) {
      $("detail").hidden = true;
      return;
    }
    document.querySelectorAll(".row[data-run]").forEach(function (r) {
      if (r.getAttribute("data-run") === runId) r.classList.add("selected");
    });
    loadDetail();
  }

  function showError(text) {
    var e = $("error");
    e.hidden = !text;
    e.textContent = text || "";
  }

  function getJson(url) {
    return fetch(url, { headers: { accept: "application/json" }, cache: "no-store" }).then(function (res) {
      return res.json().then(function (body) {
        if (!res.ok) throw new Error(body && body.error ? body.error : "HTTP " + res.status);
        return body;
      });
    });
  }

  function loadDetail() {
    var id = state.selected;
    if (!id) return Promise.resolve();
    return getJson("/api/runs/" + encodeURIComponent(id)).then(function (d) {
      if (state.selected === id) drawDetail(d);
    }, function (err) {
      if (state.selected === id) showError("Run detail: " + err.message);
    });
  }

  var polling = 0;
  function poll() {
    clearTimeout(state.timer);
    var mine = ++polling;
    var q = query();
    var list = getJson("/api/runs" + (q ? "?" + q : "")).then(function (data) {
      if (mine !== polling) return;
      showError("");
      $("store").textContent = data.store.engine + " · " + data.store.location;
      drawCounts(data);
      drawRuns(data);
      $("updated").textContent = "updated " + clock(data.now) + " · refreshes every " + POLL_MS / 1000 + " s";
      if (!document.body.hasAttribute("data-ready")) {
        document.body.setAttribute("data-ready", "1");
        if (performance.mark) performance.mark("usable");
      }
    }, function (err) { if (mine === polling) showError("Cannot read the runs: " + err.message); });
    Promise.all([list, loadDetail()]).then(function () {
      if (mine === polling) state.timer = setTimeout(poll, POLL_MS);
    });
  }

  readHash();
  buildFilters();
  if (state.selected) select(state.selected);
  poll();
})();
`;
