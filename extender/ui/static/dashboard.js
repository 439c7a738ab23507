// The placement dashboard: read-only views of the fleet, the last decisions and explain.
// Talks only to this server (/ui/api/...); builds the DOM with textContent (no HTML from data).
"use strict";

const state = { generation: null, lastDecision: -1, node: null, decision: null, fleet: null };

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

async function getJSON(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status} ${await response.text()}`);
  return response.json();
}

// A stable colour per NVLink-level domain value, so devices of one domain share it.
function domainColour(value) {
  if (!value || value === "-") return "#98a2b3";
  let hash = 0;
  for (const ch of value) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  return `hsl(${hash % 360}, 60%, 45%)`;
}

function renderFleet(fleet) {
  state.fleet = fleet;
  const totals = fleet.totals;
  document.getElementById("totals").textContent =
    `${totals.nodes} nodes, ${totals.devices} devices, ${totals.held} held, ${totals.devices - totals.held} free`;
  const body = document.querySelector("#kinds tbody");
  body.replaceChildren();
  for (const kind of fleet.kinds) {
    const row = el("tr");
    for (const value of [kind.kind, kind.nodes, kind.devices, kind.held, kind.free]) row.append(el("td", null, value));
    body.append(row);
  }
  renderNodeCards();
}

function renderNodeCards() {
  const box = document.getElementById("nodes");
  const wanted = document.getElementById("node-filter").value.trim().toLowerCase();
  box.replaceChildren();
  const nodes = (state.fleet ? state.fleet.nodes : []).filter(
    (n) => !wanted || n.name.toLowerCase().includes(wanted) || n.kind.toLowerCase().includes(wanted));
  for (const node of nodes.slice(0, 500)) {
    const card = el("div", "node-card" + (node.name === state.node ? " selected" : ""));
    card.dataset.node = node.name;
    card.append(el("div", "name", node.name), el("div", "kind", node.kind),
      el("div", "count", `${node.held}/${node.devices} held`));
    const bar = el("div", "bar");
    const fill = el("span");
    fill.style.width = node.devices ? `${(100 * node.held) / node.devices}%` : "0%";
    bar.append(fill);
    card.append(bar);
    card.addEventListener("click", () => selectNode(node.name));
    box.append(card);
  }
  if (nodes.length > 500) box.append(el("div", "muted", `… ${nodes.length - 500} more (filter to narrow)`));
}

function deviceBox(device) {
  const cls = "device" + (device.assumed ? " assumed" : device.held ? " held" : "");
  const box = el("div", cls);
  box.dataset.device = device.name;
  box.dataset.driver = device.driver;
  box.style.borderTopColor = domainColour(device.nvlink);
  box.title = `${device.driver}/${device.pool}/${device.name}\nNVLink domain: ${device.nvlink}\n` +
    `PCIe root: ${device.pcie}\nNUMA: ${device.numa}`;
  box.append(el("div", "dname", device.name), el("div", "driver", device.driver));
  if (device.claim) box.append(el("div", "claim", (device.assumed ? "assumed: " : "") + device.claim));
  if (device.partitions) {
    const parts = el("div", "partitions");
    for (const part of device.partitions) {
      const p = el("span", "partition" + (part.assumed ? " assumed" : part.held ? " held" : ""), part.name);
      p.dataset.device = part.name;
      p.title = part.claim ? `held by ${part.claim}` : "free";
      parts.append(p);
    }
    box.append(parts);
  }
  return box;
}

function renderNode(detail) {
  document.getElementById("node-section").hidden = false;
  document.getElementById("node-name").textContent = detail.name;
  document.getElementById("node-kind").textContent = `${detail.kind}, ${detail.held}/${detail.devices} held`;
  const drawing = document.getElementById("node-drawing");
  drawing.replaceChildren();
  if (!detail.numa.length) drawing.append(el("div", "muted", "this node publishes no devices"));
  for (const numa of detail.numa) {
    const box = el("div", "numa");
    box.append(el("div", "label", `NUMA node ${numa.id}`));
    for (const root of numa.pcie) {
      const pcie = el("div", "pcie");
      pcie.append(el("div", "label", `PCIe root ${root.id}`));
      const devices = el("div", "pcie-devices");
      for (const device of root.devices) devices.append(deviceBox(device));
      pcie.append(devices);
      box.append(pcie);
    }
    drawing.append(box);
  }
  const counters = document.getElementById("node-counters");
  counters.replaceChildren();
  if (!detail.counters.length) counters.append(el("div", "muted", "none"));
  for (const set of detail.counters) {
    const box = el("div", "counter-set");
    box.append(el("div", null, `${set.pool} / ${set.set} (partitions of ${set.parent})`));
    for (const counter of set.counters) {
      const line = el("div", "counter");
      line.append(el("span", null, counter.name), el("span", null, `used ${counter.used} of ${counter.capacity}`));
      box.append(line);
    }
    counters.append(box);
  }
}

async function selectNode(name) {
  state.node = name;
  renderNodeCards();
  try {
    renderNode(await getJSON(`/ui/api/nodes/${encodeURIComponent(name)}`));
  } catch (error) {
    document.getElementById("node-drawing").replaceChildren(el("div", "error", error.message));
  }
}

function renderDecisions(list) {
  const body = document.querySelector("#decisions tbody");
  body.replaceChildren();
  for (const d of list.decisions) {
    const row = el("tr", d.seq === state.decision ? "selected" : "");
    row.dataset.seq = d.seq;
    const time = new Date(d.at * 1000).toLocaleTimeString();
    for (const value of [d.seq, time, d.verb, d.pod, d.nodes_in, d.passed, d.failed, d.unresolvable, d.node, d.error]) {
      row.append(el("td", null, value));
    }
    row.addEventListener("click", () => selectDecision(d.seq));
    body.append(row);
  }
}

// A decision's nodes come as a list of rows, never as objects keyed by node name: a node named
// "constructor" or "__proto__" would otherwise read a property of Object.prototype.
async function selectDecision(seq) {
  state.decision = seq;
  for (const row of document.querySelectorAll("#decisions tbody tr")) {
    row.classList.toggle("selected", Number(row.dataset.seq) === seq);
  }
  const detail = await getJSON(`/ui/api/decisions/${seq}`);
  document.getElementById("decision-detail").hidden = false;
  document.getElementById("decision-seq").textContent = `#${detail.seq}: ${detail.verb} ${detail.pod}`;
  const body = document.querySelector("#decision-nodes tbody");
  body.replaceChildren();
  // A bind: one row per claim it wrote (a claim it created for extended resources says so).
  const bound = detail.claims && detail.claims.length ? detail.claims : [null];
  const rows = detail.verb === "bind"
    ? bound.map((claim) => ({ name: detail.node, outcome: "bound", score: null, terms: null, reason: "", claim }))
    : detail.nodes;
  for (const node of rows) {
    const terms = node.terms;
    const claim = node.claim;
    const text = terms
      ? `score ${terms.score} (locality ${terms.locality}, fragmentation ${terms.fragmentation}, packing ${terms.packing})`
      : claim
        ? `${claim.claim}${claim.created ? " (created by bind)" : ""}: ${claim.devices.join(", ") || "reserved"}`
        : "";
    const why = node.reason || (node.outcome === "passed" ? "passed" : detail.error || (node.outcome === "bound" ? "bound" : ""));
    const row = el("tr");
    row.dataset.node = node.name;
    for (const value of [node.name, node.score ?? "", text, why]) row.append(el("td", null, value));
    body.append(row);
  }
  if (detail.left_out) {
    const row = el("tr", "muted");
    const cell = el("td", null, `… ${detail.left_out} more node(s) not kept (the best-scored, or the first, are shown)`);
    cell.colSpan = 4;
    row.append(cell);
    body.append(row);
  }
}

async function loadPending() {
  const select = document.getElementById("pending");
  const current = select.value;
  const list = await getJSON("/ui/api/pending");
  select.replaceChildren(el("option", null, "(paste a pod below)"));
  select.firstChild.value = "";
  for (const ref of list.pods) {
    const option = el("option", null, ref);
    option.value = ref;
    select.append(option);
  }
  select.value = current;
}

async function explain() {
  const output = document.getElementById("explain-output");
  const pending = document.getElementById("pending").value;
  const text = pending ? JSON.stringify({ pending }) : document.getElementById("pod-text").value;
  output.textContent = "…";
  // Not text/plain: a content type no HTML form can send, so another site cannot post here unasked.
  const response = await fetch("/ui/api/explain", { method: "POST", body: text, headers: { "Content-Type": "application/yaml" } });
  const answer = await response.json();
  output.classList.toggle("error", !response.ok);
  output.textContent = response.ok ? answer.report : answer.error;
}

async function poll() {
  try {
    const status = await getJSON("/ui/api/status");
    const generation = status.generation.join(".");
    document.getElementById("status").textContent =
      `${status.ready ? "ready" : "not ready"} · generation ${generation} · ${new Date().toLocaleTimeString()}`;
    if (status.ready && generation !== state.generation) {
      state.generation = generation;
      renderFleet(await getJSON("/ui/api/fleet"));
      if (state.node) await selectNode(state.node);
      await loadPending();
    }
    if (status.last_decision !== state.lastDecision) {
      state.lastDecision = status.last_decision;
      renderDecisions(await getJSON("/ui/api/decisions"));
    }
  } catch (error) {
    document.getElementById("status").textContent = `error: ${error.message}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("node-filter").addEventListener("input", renderNodeCards);
  document.getElementById("explain-button").addEventListener("click", explain);
  poll();
  setInterval(poll, 1000);
});
