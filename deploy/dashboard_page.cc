// The dashboard's page (deploy/dashboard.h): HTML, CSS and JavaScript
// written plainly, served by the launcher; it loads nothing else.
#include <string>

#include "deploy/dashboard.h"

namespace geodesic::deploy {

// The head: metadata and the style sheet.
constexpr const char* kHead = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Geodesic</title><link rel="icon" href="data:,">
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;background:#fff} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f0f0f0} td.l,th.l{text-align:left}
.badge{display:inline-block;padding:2px 8px;border-radius:8px;background:#ddd}
.training{background:#cfe8cf}.finished{background:#bcd}.failed{background:#f3c0c0}
.bar{display:flex;width:160px;height:12px;background:#eee}.bar div{height:12px}
.c{background:#4a8}.m{background:#48c}.w{background:#c84}
.dead{color:#b00}.grid{display:flex;flex-wrap:wrap;gap:24px}
#events{max-height:220px;overflow:auto;background:#fff;border:1px solid #ddd;padding:4px 8px;font-family:monospace}
svg{background:#fff;border:1px solid #ddd}
</style></head><body>)HTML";

// The body's markup, filled in by the script.
constexpr const char* kBody = R"HTML(
<h1>Geodesic: <span id="job">…</span> <span id="status" class="badge">…</span></h1>
<div id="summary">connecting…</div>
<h2>Regions and links</h2><table id="links"><thead><tr><th class="l">link</th><th>declared delay ms</th>
<th>declared Mbit/s</th><th>probed RTT ms</th><th>probed Mbit/s</th><th>passive RTT ms</th><th>passive Mbit/s</th>
<th>MB so far</th><th>MB/s now</th></tr></thead><tbody></tbody></table>
<h2>Workers</h2><table id="workers"><thead><tr><th>id</th><th class="l">region</th><th class="l">state</th>
<th>clock</th><th>steps/s</th><th>loss</th><th>train acc</th><th class="l">time: <span class="c">&nbsp;compute&nbsp;</span>
<span class="m">&nbsp;comm&nbsp;</span> <span class="w">&nbsp;wait&nbsp;</span></th></tr></thead><tbody></tbody></table>
<h2>Shards</h2><table id="shards"><thead><tr><th>id</th><th class="l">region</th><th class="l">role</th>
<th class="l">state</th><th>chunks</th><th>updates</th><th>updates/s</th><th>staleness mean</th><th>max</th>
<th>held pulls</th></tr></thead><tbody></tbody></table>
<div id="aggregators-box" hidden><h2>Regional aggregators</h2><table id="aggregators"><thead><tr>
<th class="l">region</th><th class="l">state</th><th>pushes taken</th><th>clocks forwarded</th><th>forwards/s</th>
<th>alone</th><th>pulls served</th><th>pulls sent</th><th>WAN MB out</th><th>WAN MB in</th><th>refused</th></tr>
</thead><tbody></tbody></table></div>
<div class="grid"><div><h2>Training accuracy (workers' mean, EWMA) and samples/s</h2>
<svg id="curve" width="520" height="200"></svg></div>
<div><h2>Staleness of applied updates (clocks)</h2><svg id="staleness" width="360" height="200"></svg></div></div>
<h2>Events</h2><div id="events"></div>
)HTML";

// The script: polls /api/state and draws the job's state.
constexpr const char* kScript = R"HTML(<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
let prev = null, prevAt = 0;
const linkSeen = {}, linkRate = {};
const $ = id => document.getElementById(id);
const fmt = (v, d) => (v === undefined || v === null || v < 0) ? "–" : Number(v).toFixed(d);
function cell(text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; return td; }
function row(id, cells) { const tr = document.createElement("tr"); tr.id = id; cells.forEach(c => tr.appendChild(c)); return tr; }
function fill(table, rows) { const b = $(table).tBodies[0]; b.replaceChildren(...rows); }
function rate(now, before, dt) { return (before === undefined || dt <= 0) ? undefined : (now - before) / dt; }
function passive(s, link) {
  let best;
  for (const w of s.workers) if (w.region === link.to)
    for (const l of w.links) if (l.server_region === link.from && l.mbit > 0) best = best || l;
  return best;
}
function links(s, dt) {
  fill("links", s.links.map(l => {
    const p = passive(s, l), key = l.from + ">" + l.to, now = performance.now(), seen = linkSeen[key];
    // The launcher reads link bytes every 2 s: a rate over the last two readings that differ.
    if (!seen || seen.bytes !== l.bytes) {
      if (seen && l.bytes !== undefined) linkRate[key] = (l.bytes - seen.bytes) / ((now - seen.at) / 1000);
      linkSeen[key] = {bytes: l.bytes, at: now};
    }
    const r = linkRate[key];
    return row("link-" + l.from + "-" + l.to, [cell(l.from + " → " + l.to, "l"), cell(fmt(l.delay_ms, 1)),
      cell(fmt(l.bandwidth_mbit, 0)), cell(fmt(l.probed_rtt_ms, 1)), cell(fmt(l.probed_mbit, 1)),
      cell(p ? fmt(p.min_rtt_ms, 1) : "–"), cell(p ? fmt(p.mbit, 1) : "–"),
      cell(fmt((l.bytes || 0) / 1e6, 1), "bytes"), cell(r === undefined ? "–" : fmt(r / 1e6, 2), "rate")]);
  }));
}
function split(w) {
  const t = w.compute_s + w.comm_s + w.wait_s, d = document.createElement("td"), bar = document.createElement("div");
  bar.className = "bar"; d.className = "l";
  for (const [k, v] of [["c", w.compute_s], ["m", w.comm_s], ["w", w.wait_s]]) {
    const part = document.createElement("div"); part.className = k;
    part.style.width = (t > 0 ? 100 * v / t : 0) + "%"; part.title = v.toFixed(1) + " s"; bar.appendChild(part);
  }
  d.appendChild(bar); return d;
}
function workers(s, dt) {
  fill("workers", s.workers.map(w => {
    const old = prev && prev.workers.find(o => o.id === w.id), st = w.done ? "done" : w.live ? "live" : "gone";
    return row("worker-" + w.id, [cell(w.id), cell(w.region, "l"), cell(st, "l" + (w.live || w.done ? "" : " dead")),
      cell(w.clock, "clock"), cell(fmt(rate(w.steps, old && old.steps, dt), 1), "steps-rate"), cell(fmt(w.loss, 3)),
      cell(fmt(w.train_accuracy, 3)), split(w)]);
  }));
}
function shards(s, dt) {
  fill("shards", s.shards.map(h => {
    const old = prev && prev.shards.find(o => o.id === h.id && o.backup === h.backup);
    const role = h.backup ? (h.promoted ? "promoted backup" : "backup") : "primary";
    return row("shard-" + h.id + (h.backup ? "b" : ""), [cell(h.id), cell(h.region, "l"), cell(role, "l"),
      cell(h.live ? "live" : "gone", "l" + (h.live ? "" : " dead")), cell(h.chunks === undefined ? "–" : h.chunks),
      cell(h.updates, "updates"), cell(fmt(rate(h.updates, old && old.updates, dt), 0)), cell(fmt(h.staleness_mean, 2)),
      cell(h.staleness_max), cell(h.held_pulls)]);
  }));
}
function aggregators(s, dt) {
  const list = s.aggregators || [];
  $("aggregators-box").hidden = list.length === 0;
  fill("aggregators", list.map(a => {
    const old = prev && prev.aggregators && prev.aggregators.find(o => o.id === a.id);
    const mb = v => v === undefined ? "–" : fmt(v / 1e6, 1);
    return row("aggregator-" + a.id, [cell(a.region, "l"), cell(a.live ? "live" : "gone", "l" + (a.live ? "" : " dead")),
      cell(a.pushes_taken), cell(a.clocks_forwarded, "forwarded"),
      cell(fmt(rate(a.clocks_forwarded, old && old.clocks_forwarded, dt), 1)), cell(a.late_forwards),
      cell(a.pulls_served), cell(a.upstream_pulls), cell(mb(a.upstream_bytes_sent)), cell(mb(a.upstream_bytes_received)),
      cell(a.pushes_refused)]);
  }));
}
function svg(tag, attrs) { const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]); return e; }
function curve(s) {
  const g = $("curve"), W = 520, H = 200, h = s.history; g.replaceChildren();
  if (h.length < 2) return;
  const t1 = h[h.length - 1][0], t0 = h[0][0], maxRate = Math.max(1, ...h.map(p => p[1]));
  const x = t => 30 + (W - 40) * (t - t0) / Math.max(1e-9, t1 - t0);
  const line = (k, scale, color) => g.appendChild(svg("polyline", {fill: "none", stroke: color, "stroke-width": 2,
    points: h.filter(p => p[k] >= 0).map(p => x(p[0]) + "," + (H - 20 - (H - 30) * p[k] / scale)).join(" ")}));
  const maxLoss = Math.max(1e-9, ...h.map(p => p[3]));
  line(2, 1, "#4a8"); line(1, maxRate, "#48c"); line(3, maxLoss, "#c84");
  const label = (text, y, color) => { const t = svg("text", {x: 34, y: y, fill: color, "font-size": 11}); t.textContent = text; g.appendChild(t); };
  label("accuracy 0..1", 14, "#4a8"); label("samples/s 0.." + maxRate.toFixed(0), 28, "#48c");
  label("training loss 0.." + maxLoss.toFixed(2), 42, "#c84");
  label("0 s", H - 4, "#666"); const e = svg("text", {x: W - 60, y: H - 4, "font-size": 11}); e.textContent = t1.toFixed(0) + " s"; g.appendChild(e);
}
function staleness(s) {
  const g = $("staleness"), W = 360, H = 200, keys = Object.keys(s.staleness).map(Number).sort((a, b) => a - b);
  g.replaceChildren();
  if (!keys.length) return;
  const max = Math.max(...keys.map(k => s.staleness[k])), bw = (W - 40) / keys.length;
  keys.forEach((k, i) => {
    const v = s.staleness[k], bh = (H - 40) * v / max;
    g.appendChild(svg("rect", {x: 30 + i * bw, y: H - 20 - bh, width: Math.max(1, bw - 4), height: bh, fill: "#48c",
      class: "stale-bar", "data-staleness": k, "data-count": v}));
    const t = svg("text", {x: 30 + i * bw, y: H - 6, "font-size": 11}); t.textContent = k; g.appendChild(t);
  });
}
function events(s) {
  $("events").replaceChildren(...s.events.slice().reverse().map(e => {
    const d = document.createElement("div"); d.className = "event"; d.textContent = "[" + e[0].toFixed(1) + " s] " + e[1]; return d;
  }));
}
function render(s) {
  const now = performance.now(), dt = prev ? (now - prevAt) / 1000 : 0;
  $("job").textContent = s.job; $("status").textContent = s.status; $("status").className = "badge " + s.status;
  let text = fmt(s.elapsed_s, 1) + " s of training · " + fmt(s.samples_per_s, 0) + " samples/s · slowest clock " +
    (s.min_clock === undefined ? "–" : s.min_clock) + " · staleness bound " + s.staleness_bound;
  if (s.test_accuracy !== undefined) text += " · test accuracy " + s.test_accuracy.toFixed(4);
  if (s.test_accuracy === undefined && s.test_loss !== undefined) text += " · validation loss " + s.test_loss.toFixed(4);
  if (s.test_perplexity !== undefined) text += " (perplexity " + s.test_perplexity.toFixed(3) + ")";
  $("summary").textContent = text;
  links(s, dt); workers(s, dt); shards(s, dt); aggregators(s, dt); curve(s); staleness(s); events(s);
  prev = s; prevAt = now;
}
async function poll() {
  try {
    const r = await fetch("/api/state", {headers: token ? {Authorization: "Bearer " + token} : {}, cache: "no-store"});
    if (r.ok) render(await r.json()); else $("summary").textContent = "the launcher answered " + r.status;
  } catch (e) { $("summary").textContent = "the launcher is gone (the job ended?)"; return; }
  setTimeout(poll, 1000);
}
poll();
</script></body></html>
)HTML";

const std::string& DashboardPage() {
  static const std::string page = std::string(kHead) + kBody + kScript;
  return page;
}

}  // namespace geodesic::deploy
