// Polls /ui/api/overview every second and redraws. No framework: the page
// is rebuilt from one JSON document, so it stays small and works offline.
"use strict";

const $ = (id) => document.getElementById(id);
let last = null; // the previous poll, for binds/s

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// Kubernetes CPU quantity ("500m", "4") to milli-cores.
function milli(q) {
  if (!q) return null;
  return q.endsWith("m") ? parseFloat(q) : parseFloat(q) * 1000;
}

function dims(m) {
  if (!m) return "–";
  const order = (k) => (k === "cpu" ? "0" : k === "memory" ? "1" : k === "pods" ? "2" : "3" + k);
  return Object.keys(m).sort((a, b) => order(a).localeCompare(order(b))).map((k) => `${k} ${m[k]}`).join(", ") || "–";
}

function secs(v) {
  if (v < 0) return "–";
  return v < 1 ? `${Math.round(v * 1000)} ms` : `${v.toFixed(2)} s`;
}

function bar(q) {
  const cap = milli(q.capability && q.capability.cpu);
  const used = milli(q.allocated && q.allocated.cpu) || 0;
  const des = milli(q.deserved && q.deserved.cpu);
  if (!cap) return `<span class="bar"></span>${esc(q.allocated ? q.allocated.cpu || "0" : "0")} / ∞`;
  const pct = Math.min(100, (100 * used) / cap);
  let marker = "";
  if (des) marker = `<span class="deserved" style="left:${Math.min(100, (100 * des) / cap)}%" title="deserved ${esc(q.deserved.cpu)}"></span>`;
  return `<span class="bar"><span class="fill${pct >= 100 ? " full" : ""}" style="width:${pct}%"></span>${marker}</span>` +
    `${esc(q.allocated ? q.allocated.cpu || "0" : "0")} / ${esc(q.capability.cpu)}`;
}

function render(o) {
  $("whoami").textContent = `served by ${o.shard} · ${o.version}`;
  $("updated").textContent = `updated ${new Date(o.now).toLocaleTimeString()}`;
  $("binds").textContent = o.binds;
  if (last) {
    const dt = (new Date(o.now) - new Date(last.now)) / 1000;
    if (dt > 0) $("rate").textContent = ((o.binds - last.binds) / dt).toFixed(1);
  }
  last = o;
  const l = o.latency;
  $("latency").textContent = l.count ? `${secs(l.p50)} / ${secs(l.p90)} / ${secs(l.p99)}` : "no binds yet";
  $("waitingTotal").textContent = o.waitingTotal;
  $("ownership").textContent = o.ownershipChanges;

  $("shards").tBodies[0].innerHTML = (o.shards || []).map((s) =>
    `<tr><td>${esc(s.name)}${s.self ? " (this one)" : ""}</td><td>${s.leader ? "leader" : s.self ? "–" : "?"}</td>` +
    `<td class="num">${s.partitions}</td><td class="num">${s.queues}</td></tr>`).join("");

  const f = $("filter").value.trim().toLowerCase();
  $("queues").tBodies[0].innerHTML = (o.queues || []).filter((q) => !f || q.name.toLowerCase().includes(f)).map((q) => {
    if (q.leftOut) {
      return `<tr class="leftout"><td>${esc(q.name)}</td><td>left out</td><td colspan="8">not scheduled: ${esc(q.leftOut)}</td></tr>`;
    }
    const pad = "&nbsp;&nbsp;".repeat(q.depth);
    return `<tr data-queue="${esc(q.name)}"><td>${pad}${esc(q.name)}</td><td>${esc(q.state)}</td><td>${bar(q)}</td>` +
      `<td>${esc(dims(q.allocated))}</td><td>${esc(dims(q.capability))}</td><td>${esc(dims(q.deserved))}</td><td>${esc(dims(q.guarantee))}</td>` +
      `<td class="num">${q.pending}</td><td class="num">${q.inqueue}</td><td class="num">${q.running}</td></tr>`;
  }).join("");

  const w = o.waiting || [];
  $("waiting").tBodies[0].innerHTML = w.length ? w.map((j) =>
    `<tr data-job="${esc(j.job)}"><td>${esc(j.job)}</td><td>${esc(j.queue)}</td><td>${esc(j.phase)}</td><td>${esc(j.age)}</td>` +
    `<td class="why">${j.reason ? `<b>${esc(j.reason)}</b>: ${esc(j.message)}` : ""}</td></tr>`).join("") +
    (o.waitingTotal > w.length ? `<tr><td colspan="5" class="muted">and ${o.waitingTotal - w.length} more</td></tr>` : "")
    : `<tr><td colspan="5" class="muted">none</td></tr>`;

  $("evictions").textContent = (o.evictions && o.evictions.length) ? o.evictions.join("\n") : "none (preemption and reclaim are not built yet)";
}

async function poll() {
  try {
    const r = await fetch("api/overview", { cache: "no-store" });
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    render(await r.json());
  } catch (e) {
    $("updated").textContent = `cannot reach the shard: ${e.message}`;
  }
}

$("filter").addEventListener("input", () => last && render(last));
poll();
setInterval(poll, 1000);
