// Gregor console: one page, hash routes, the JSON API under /api/. Vanilla JS, no build, no CDN.
// Every text from the cluster goes into the page through textContent (el()), never as HTML.
"use strict";

const LAG_POLL_MS = 1000;      // the group view polls its lag this often
const LAG_HISTORY = 300;       // points kept for the live chart (5 minutes at 1 s)
let timer = null;              // the current view's poller, stopped on every route change
let routeSeq = 0;              // a late answer for a view that is gone is dropped

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) if (k === "text") e.textContent = v; else e.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) e.append(c);
  return e;
}

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  };
  const resp = await fetch("/api/" + path, opts);
  let data;
  try { data = await resp.json(); } catch (e) { data = {message: resp.statusText}; }
  if (!resp.ok) {
    const err = new Error(data.message || resp.statusText);
    err.code = data.error; err.status = resp.status;
    throw err;
  }
  return data;
}

function toast(message, ok) {
  const t = document.getElementById("toast");
  t.textContent = message; t.className = ok ? "ok" : ""; t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, ok ? 3000 : 8000);
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

const enc = encodeURIComponent;
const view = () => document.getElementById("view");
function show(...nodes) { view().replaceChildren(...nodes.filter(n => n !== null && n !== undefined)); }
function errorBox(e) { return el("p", {class: "error", id: "error"}, e.code ? `${e.code}: ${e.message}` : e.message); }

// --- routes ------------------------------------------------------------------------------------

const routes = [
  [/^#\/brokers$/, brokersView],
  [/^#\/topics$/, topicsView],
  [/^#\/topic\/(.+)$/, (m, seq) => topicView(decodeURIComponent(m[1]), seq)],
  [/^#\/groups$/, groupsView],
  [/^#\/group\/(.+)$/, (m, seq) => groupView(decodeURIComponent(m[1]), seq)],
  [/^#\/messages(?:\?(.*))?$/, (m, seq) => messagesView(new URLSearchParams(m[1] || ""), seq)],
  [/^#\/produce(?:\?(.*))?$/, (m, seq) => produceView(new URLSearchParams(m[1] || ""), seq)],
];

async function route() {
  if (timer) { clearInterval(timer); timer = null; }
  const seq = ++routeSeq;
  const hash = location.hash || "#/topics";
  const section = hash.slice(2).split(/[/?]/)[0];
  const nav = {topic: "topics", group: "groups"}[section] || section;
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === nav);
  for (const [re, fn] of routes) {
    const m = hash.match(re);
    if (m) {
      show(el("p", {class: "muted"}, "Loading…"));
      try { await fn(m, seq); } catch (e) { if (seq === routeSeq) show(errorBox(e)); }
      return;
    }
  }
  location.hash = "#/topics";
}
const current = seq => seq === routeSeq;

// --- brokers -----------------------------------------------------------------------------------

async function brokersView(m, seq) {
  const c = await api("cluster");
  if (!current(seq)) return;
  show(
    el("h1", {}, "Brokers"),
    el("div", {class: "stats"},
      stat(c.brokers.length, "brokers"), stat(c.controller === null ? "none" : c.controller, "controller"),
      stat(c.cluster_id || "–", "cluster id")),
    el("table", {id: "brokers-table"},
      el("thead", {}, el("tr", {}, el("th", {}, "Id"), el("th", {}, "Host"), el("th", {class: "num"}, "Port"),
        el("th", {}, "Rack"), el("th", {}, "Role"))),
      el("tbody", {}, c.brokers.map(b => el("tr", {"data-broker": b.id},
        el("td", {}, b.id), el("td", {}, b.host), el("td", {class: "num"}, b.port), el("td", {}, b.rack || "–"),
        el("td", {}, b.controller ? el("span", {class: "pill ok"}, "controller") : ""))))));
}

function stat(value, label) { return el("div", {class: "stat"}, el("b", {}, value), el("span", {}, label)); }

// --- topics ------------------------------------------------------------------------------------

async function topicsView(m, seq) {
  const data = await api("topics");
  if (!current(seq)) return;
  const rows = data.topics.map(t => el("tr", {"data-topic": t.name, class: t.under_replicated ? "warn" : null},
    el("td", {}, el("a", {href: "#/topic/" + enc(t.name)}, t.name), t.internal ? " " : null,
      t.internal ? el("span", {class: "pill"}, "internal") : null),
    el("td", {class: "num"}, t.partition_count), el("td", {class: "num"}, t.replication_factor),
    el("td", {class: "num"}, t.under_replicated), el("td", {class: "num"}, fmtBytes(t.size))));
  show(
    el("h1", {}, "Topics"),
    el("table", {id: "topics-table"},
      el("thead", {}, el("tr", {}, el("th", {}, "Topic"), el("th", {class: "num"}, "Partitions"),
        el("th", {class: "num"}, "Replication"), el("th", {class: "num"}, "Under-replicated"),
        el("th", {class: "num"}, "Size"))),
      el("tbody", {}, rows)),
    data.sizes_known ? null : el("p", {class: "muted"}, "Sizes unknown: no broker answered DescribeLogDirs."),
    createTopicForm());
}

function createTopicForm() {
  const name = el("input", {id: "create-name", placeholder: "orders", required: true});
  const parts = el("input", {id: "create-partitions", type: "number", min: 1, value: 1});
  const rf = el("input", {id: "create-rf", type: "number", min: -1, value: -1, title: "-1: the broker default"});
  const configs = el("input", {id: "create-configs", placeholder: "retention.ms=86400000,cleanup.policy=delete"});
  const confirmBox = el("div", {id: "create-confirm"});
  const start = () => {
    const n = name.value.trim();
    if (!n) { toast("Give the topic a name."); return; }
    confirmBox.replaceChildren(confirmPanel(`Create topic “${n}” with ${parts.value} partition(s)?`,
      n, "create-confirm-name", "create-confirm-button", "Create topic", false, async () => {
        const cfg = {};
        for (const kv of configs.value.split(",").map(s => s.trim()).filter(Boolean)) {
          const i = kv.indexOf("=");
          if (i < 1) throw new Error(`config “${kv}” is not key=value`);
          cfg[kv.slice(0, i).trim()] = kv.slice(i + 1).trim();
        }
        await api("topics", {name: n, partitions: Number(parts.value), replication_factor: Number(rf.value),
          configs: cfg});
        toast(`Topic ${n} created.`, true);
        location.hash = "#/topic/" + enc(n);
      }, () => confirmBox.replaceChildren()));
  };
  return el("div", {class: "card"}, el("h2", {}, "Create a topic"),
    el("div", {class: "row"},
      el("label", {}, "Name", name), el("label", {}, "Partitions", parts), el("label", {}, "Replication factor", rf),
      el("label", {}, "Configs (key=value, comma-separated)", configs),
      el("button", {id: "create-submit", onclick: start}, "Create…")),
    confirmBox);
}

// A confirmation the user passes by typing `expected` (the topic's name): the button stays disabled until then.
function confirmPanel(question, expected, inputId, buttonId, label, danger, action, cancel) {
  const input = el("input", {id: inputId, placeholder: expected, autocomplete: "off"});
  const button = el("button", {id: buttonId, class: danger ? "danger" : null, disabled: true}, label);
  const msg = el("span", {class: "error"});
  input.addEventListener("input", () => { button.disabled = input.value !== expected; });
  button.addEventListener("click", async () => {
    button.disabled = true;
    try { await action(); } catch (e) { msg.textContent = e.message; button.disabled = false; }
  });
  return el("div", {class: "card confirm"}, el("p", {}, question),
    el("div", {class: "row"}, el("label", {}, `Type “${expected}” to confirm`, input), button,
      el("button", {class: "secondary", onclick: cancel}, "Cancel"), msg));
}

async function topicView(name, seq) {
  const [t, cfg] = await Promise.all([api("topics/" + enc(name)), api("topics/" + enc(name) + "/configs")]);
  if (!current(seq)) return;
  const parts = el("table", {id: "partitions-table"},
    el("thead", {}, el("tr", {}, ["Partition", "Leader", "Replicas", "ISR", "Log start", "High watermark", "Size", ""]
      .map((h, i) => el("th", {class: i === 0 || i > 3 && i < 7 ? "num" : null}, h)))),
    el("tbody", {}, t.partitions.map(p => el("tr", {class: p.under_replicated ? "warn" : null},
      el("td", {class: "num"}, p.partition), el("td", {}, p.leader), el("td", {}, p.replicas.join(", ")),
      el("td", {}, p.isr.join(", ")), el("td", {class: "num"}, p.log_start_offset ?? "–"),
      el("td", {class: "num"}, p.high_watermark ?? "–"), el("td", {class: "num"}, fmtBytes(p.size)),
      el("td", {}, el("a", {href: `#/messages?topic=${enc(name)}&partition=${p.partition}`}, "browse"))))));
  show(
    el("h1", {}, "Topic ", el("span", {id: "topic-name"}, name)),
    el("div", {class: "stats"}, stat(t.partition_count, "partitions"), stat(t.replication_factor, "replication factor"),
      stat(fmtBytes(t.size), "size"), stat(t.under_replicated, "under-replicated")),
    el("p", {}, el("a", {href: `#/messages?topic=${enc(name)}`}, "Browse messages"), " · ",
      el("a", {href: `#/produce?topic=${enc(name)}`}, "Produce a test message")),
    el("h2", {}, "Partitions"), parts,
    el("h2", {}, "Configs"), configTable(name, cfg.configs),
    deleteTopicCard(name));
}

function configTable(topic, configs) {
  const edits = {};
  const save = el("button", {id: "configs-save", disabled: true}, "Save changes");
  const rows = configs.map(c => {
    const input = el("input", {value: c.value ?? "", "data-config": c.name, disabled: c.read_only || c.sensitive,
      size: 28});
    input.addEventListener("input", () => { edits[c.name] = input.value; save.disabled = false; });
    const reset = c.source === "DYNAMIC_TOPIC_CONFIG" ? el("button", {class: "secondary", title: "remove the override",
      onclick: async () => {
        try { await api(`topics/${enc(topic)}/configs`, {delete: [c.name]}); toast(`${c.name} reset.`, true); route(); }
        catch (e) { toast(e.message); }
      }}, "Reset") : null;
    return el("tr", {"data-config-row": c.name}, el("td", {}, c.name), el("td", {}, input),
      el("td", {}, el("span", {class: "pill" + (c.source === "DYNAMIC_TOPIC_CONFIG" ? " ok" : "")}, c.source)),
      el("td", {}, reset));
  });
  save.addEventListener("click", async () => {
    try {
      await api(`topics/${enc(topic)}/configs`, {set: edits});
      toast("Configs saved.", true); route();
    } catch (e) { toast(e.message); }
  });
  return el("div", {}, el("table", {id: "configs-table"},
    el("thead", {}, el("tr", {}, el("th", {}, "Name"), el("th", {}, "Value"), el("th", {}, "Source"), el("th", {}, ""))),
    el("tbody", {}, rows)), el("p", {}, save));
}

function deleteTopicCard(name) {
  const box = el("div", {});
  const open = el("button", {id: "delete-start", class: "danger"}, "Delete topic…");
  open.addEventListener("click", () => box.replaceChildren(confirmPanel(
    `Delete topic “${name}” and all its data? This cannot be undone.`, name, "delete-confirm-name",
    "delete-confirm-button", "Delete topic", true, async () => {
      await api(`topics/${enc(name)}/delete`, {confirm: name});
      toast(`Topic ${name} deleted.`, true);
      location.hash = "#/topics";
    }, () => box.replaceChildren())));
  return el("div", {class: "card"}, el("h2", {}, "Danger zone"), open, box);
}

// --- consumer groups ---------------------------------------------------------------------------

async function groupsView(m, seq) {
  const data = await api("groups");
  if (!current(seq)) return;
  show(el("h1", {}, "Consumer groups"),
    data.groups.length ? el("table", {id: "groups-table"},
      el("thead", {}, el("tr", {}, el("th", {}, "Group"), el("th", {}, "State"), el("th", {}, "Type"))),
      el("tbody", {}, data.groups.map(g => el("tr", {"data-group": g.group_id},
        el("td", {}, el("a", {href: "#/group/" + enc(g.group_id)}, g.group_id)),
        el("td", {}, statePill(g.state)), el("td", {}, g.type || (g.simple ? "simple" : "–"))))))
      : el("p", {class: "muted", id: "groups-empty"}, "No consumer groups."),
    data.errors.length ? el("p", {class: "error"}, data.errors.join("; ")) : null);
}

function statePill(state) {
  const s = state || "UNKNOWN";
  return el("span", {class: "pill" + (s === "STABLE" ? " ok" : s === "DEAD" ? " bad" : "")}, s);
}

async function groupView(id, seq) {
  const history = [];  // [time_ms, total_lag], bounded by LAG_HISTORY
  const chart = svg("svg", {class: "chart", id: "lag-chart", viewBox: "0 0 800 240", preserveAspectRatio: "none"});
  const lagNumber = el("b", {id: "total-lag"}, "–");
  const state = el("b", {id: "group-state"}, "–");
  const membersCount = el("b", {id: "member-count"}, "–");
  const membersBox = el("div", {});
  const partsBox = el("div", {});
  const status = el("p", {class: "muted", id: "lag-status"});
  show(el("h1", {}, "Consumer group ", el("span", {id: "group-id"}, id)),
    el("div", {class: "stats"}, el("div", {class: "stat"}, lagNumber, el("span", {}, "total lag (records)")),
      el("div", {class: "stat"}, state, el("span", {}, "state")),
      el("div", {class: "stat"}, membersCount, el("span", {}, "members"))),
    el("h2", {}, "Lag, live"), chart, status,
    el("h2", {}, "Partitions"), partsBox, el("h2", {}, "Members"), membersBox);
  let busy = false;
  const poll = async () => {
    if (busy) return;  // a slow answer: skip a beat instead of piling requests up
    busy = true;
    try {
      const g = await api("groups/" + enc(id));
      if (!current(seq)) return;
      history.push([g.time_ms, g.total_lag]);
      if (history.length > LAG_HISTORY) history.splice(0, history.length - LAG_HISTORY);
      lagNumber.textContent = g.total_lag;
      state.textContent = g.state || "–";
      membersCount.textContent = g.members.length;
      drawChart(chart, history);
      chart.setAttribute("data-points", history.length);
      chart.setAttribute("data-last", g.total_lag);
      status.textContent = `Updated ${new Date(g.time_ms).toLocaleTimeString()} · ${history.length} points · polling every ${LAG_POLL_MS / 1000} s`;
      partsBox.replaceChildren(groupPartitions(g));
      membersBox.replaceChildren(groupMembers(g));
    } catch (e) {
      if (current(seq)) status.textContent = "Error: " + e.message;
    } finally { busy = false; }
  };
  await poll();
  if (current(seq)) timer = setInterval(poll, LAG_POLL_MS);
}

function groupPartitions(g) {
  if (!g.partitions.length) return el("p", {class: "muted"}, "No committed offsets and no assignment.");
  return el("table", {id: "group-partitions"},
    el("thead", {}, el("tr", {}, el("th", {}, "Topic"), el("th", {class: "num"}, "Partition"),
      el("th", {class: "num"}, "Committed"), el("th", {class: "num"}, "High watermark"), el("th", {class: "num"}, "Lag"),
      el("th", {}, "Member"))),
    el("tbody", {}, g.partitions.map(p => el("tr", {"data-tp": `${p.topic}-${p.partition}`},
      el("td", {}, p.topic), el("td", {class: "num"}, p.partition), el("td", {class: "num"}, p.committed ?? "–"),
      el("td", {class: "num"}, p.high_watermark ?? "–"), el("td", {class: "num lag"}, p.lag ?? "–"),
      el("td", {}, p.member_id || "–")))));
}

function groupMembers(g) {
  if (!g.members.length) return el("p", {class: "muted"}, "No active members.");
  return el("table", {id: "group-members"},
    el("thead", {}, el("tr", {}, el("th", {}, "Member"), el("th", {}, "Client id"), el("th", {}, "Host"),
      el("th", {}, "Assignment"))),
    el("tbody", {}, g.members.map(mb => el("tr", {},
      el("td", {}, mb.member_id), el("td", {}, mb.client_id), el("td", {}, mb.host),
      el("td", {}, mb.assignment.map(a => `${a.topic}-${a.partition}`).join(", ") || "–")))));
}

// A line chart of [time_ms, value] points: y from 0 to a rounded maximum, x over the kept history.
function drawChart(chart, points) {
  const W = 800, H = 240, L = 56, R = 14, T = 12, B = 26;
  const maxV = niceMax(Math.max(1, ...points.map(p => p[1])));
  const t0 = points[0][0], t1 = Math.max(points[points.length - 1][0], t0 + 1000);
  const x = t => L + (W - L - R) * (t - t0) / (t1 - t0);
  const y = v => T + (H - T - B) * (1 - v / maxV);
  const nodes = [];
  for (let i = 0; i <= 4; i++) {
    const v = maxV * i / 4, yy = y(v);
    nodes.push(svg("line", {class: "grid", x1: L, x2: W - R, y1: yy, y2: yy}));
    nodes.push(svg("text", {class: "axis", x: L - 6, y: yy + 4, "text-anchor": "end", text: fmtCount(v)}));
  }
  const span = Math.round((t1 - t0) / 1000);
  nodes.push(svg("text", {class: "axis", x: L, y: H - 6, text: `−${span} s`}));
  nodes.push(svg("text", {class: "axis", x: W - R, y: H - 6, "text-anchor": "end", text: "now"}));
  const pts = points.map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`);
  if (points.length > 1) {
    nodes.push(svg("polygon", {class: "area",
      points: `${x(t0).toFixed(1)},${y(0)} ${pts.join(" ")} ${x(points[points.length - 1][0]).toFixed(1)},${y(0)}`}));
    nodes.push(svg("polyline", {class: "line", points: pts.join(" ")}));
  }
  const last = points[points.length - 1];
  nodes.push(svg("circle", {class: "dot", cx: x(last[0]), cy: y(last[1]), r: 3.5}));
  chart.replaceChildren(...nodes);
}

function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmtCount(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + "M";
  if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
  return String(Math.round(v * 100) / 100);
}

// --- messages ----------------------------------------------------------------------------------

let valueFormat = "text";

async function messagesView(params, seq) {
  const topics = (await api("topics")).topics.map(t => t.name);
  if (!current(seq)) return;
  const topic = el("select", {id: "browse-topic"}, topics.map(n => el("option", {value: n}, n)));
  topic.value = params.get("topic") || topics.find(n => !n.startsWith("__")) || topics[0] || "";
  const partition = el("input", {id: "browse-partition", type: "number", min: 0, value: params.get("partition") || 0});
  const from = el("select", {id: "browse-from"}, el("option", {value: "latest"}, "last records"),
    el("option", {value: "offset"}, "offset"), el("option", {value: "timestamp"}, "timestamp"));
  const offset = el("input", {id: "browse-offset", placeholder: "offset or ISO time", size: 24});
  const limit = el("input", {id: "browse-limit", type: "number", min: 1, max: 500, value: params.get("limit") || 50});
  const format = el("select", {id: "browse-format"}, ["text", "json", "hex"].map(f => el("option", {value: f}, f)));
  format.value = valueFormat;
  if (params.get("offset")) { from.value = "offset"; offset.value = params.get("offset"); }
  if (params.get("timestamp")) { from.value = "timestamp"; offset.value = new Date(Number(params.get("timestamp"))).toISOString(); }
  const results = el("div", {id: "browse-results"});
  let last = null;
  const render = () => { if (last) results.replaceChildren(recordsTable(last)); };
  format.addEventListener("change", () => { valueFormat = format.value; render(); });
  const load = async () => {
    const q = new URLSearchParams({partition: partition.value, limit: limit.value});
    if (from.value === "offset") q.set("offset", offset.value.trim());
    if (from.value === "timestamp") {
      const t = /^\d+$/.test(offset.value.trim()) ? Number(offset.value.trim()) : Date.parse(offset.value);
      if (Number.isNaN(t)) { toast("Give a timestamp as ISO time or epoch milliseconds."); return; }
      q.set("timestamp", t);
    }
    results.replaceChildren(el("p", {class: "muted"}, "Reading…"));
    try {
      last = await api(`topics/${enc(topic.value)}/messages?${q}`);
      render();
    } catch (e) { results.replaceChildren(errorBox(e)); }
  };
  show(el("h1", {}, "Messages"),
    el("div", {class: "card row"}, el("label", {}, "Topic", topic), el("label", {}, "Partition", partition),
      el("label", {}, "From", from), el("label", {}, "Offset / time", offset), el("label", {}, "Max records", limit),
      el("label", {}, "Show as", format), el("button", {id: "browse-submit", onclick: load}, "Read")),
    results);
  if (topic.value) await load();
}

function recordsTable(data) {
  const head = el("p", {class: "muted"},
    `${data.topic}-${data.partition}: log start ${data.log_start_offset}, high watermark ${data.high_watermark}; ` +
    `${data.records.length} record(s) from offset ${data.start_offset} (at most ${data.limit}).`);
  if (!data.records.length) return el("div", {}, head, el("p", {id: "browse-empty"}, "No records there."));
  return el("div", {}, head, el("table", {id: "records-table"},
    el("thead", {}, el("tr", {}, el("th", {class: "num"}, "Offset"), el("th", {}, "Timestamp"), el("th", {}, "Key"),
      el("th", {}, "Headers"), el("th", {}, "Value"))),
    el("tbody", {}, data.records.map(r => el("tr", {"data-offset": r.offset},
      el("td", {class: "num"}, r.offset),
      el("td", {}, r.timestamp === null ? "–" : new Date(r.timestamp).toISOString()),
      el("td", {class: "key"}, renderBytes(r.key, "text")),
      el("td", {class: "headers"}, r.headers.map(h => el("div", {}, el("b", {}, h.key), ": ", renderBytes(h.value, "text")))),
      el("td", {class: "value"}, renderBytes(r.value, valueFormat)))))));
}

function renderBytes(b, format) {
  if (b === null) return el("span", {class: "muted"}, "null");
  let text;
  if (format === "hex" || (b.text === null && format !== "hex")) {
    const raw = atob(b.b64);
    const out = [];
    for (let i = 0; i < raw.length; i += 16) {
      const hex = [];
      for (let j = i; j < Math.min(i + 16, raw.length); j++) hex.push(raw.charCodeAt(j).toString(16).padStart(2, "0"));
      out.push(i.toString(16).padStart(6, "0") + "  " + hex.join(" "));
    }
    text = out.join("\n");
  } else if (format === "json") {
    try { text = JSON.stringify(JSON.parse(b.text), null, 2); } catch (e) { text = b.text; }
  } else text = b.text;
  return el("pre", {}, text, b.truncated ? el("span", {class: "muted"}, `\n… ${b.size} bytes in all`) : null);
}

// --- produce -----------------------------------------------------------------------------------

async function produceView(params, seq) {
  const topics = (await api("topics")).topics.map(t => t.name).filter(n => !n.startsWith("__"));
  if (!current(seq)) return;
  const topic = el("select", {id: "produce-topic"}, topics.map(n => el("option", {value: n}, n)));
  topic.value = params.get("topic") || topics[0] || "";
  const partition = el("input", {id: "produce-partition", type: "number", min: 0, placeholder: "any"});
  const key = el("input", {id: "produce-key", placeholder: "(no key)", size: 30});
  const headers = el("textarea", {id: "produce-headers", placeholder: "one header a line: name=value"});
  const value = el("textarea", {id: "produce-value", placeholder: '{"hello": "world"}'});
  const result = el("div", {id: "produce-result"});
  const send = async () => {
    const hs = [];
    for (const line of headers.value.split("\n").map(s => s.trim()).filter(Boolean)) {
      const i = line.indexOf("=");
      if (i < 1) { toast(`Header “${line}” is not name=value.`); return; }
      hs.push([line.slice(0, i).trim(), line.slice(i + 1)]);
    }
    try {
      const r = await api(`topics/${enc(topic.value)}/produce`, {
        key: key.value === "" ? null : key.value, value: value.value,
        partition: partition.value === "" ? null : Number(partition.value), headers: hs});
      result.replaceChildren(el("p", {class: "card"}, "Written to ",
        el("a", {href: `#/messages?topic=${enc(r.topic)}&partition=${r.partition}&offset=${r.offset}`},
          `${r.topic}-${r.partition} at offset `, el("span", {id: "produce-offset"}, r.offset))));
    } catch (e) { result.replaceChildren(errorBox(e)); }
  };
  show(el("h1", {}, "Produce a test message"),
    el("div", {class: "card"},
      el("div", {class: "row"}, el("label", {}, "Topic", topic), el("label", {}, "Partition (empty: partitioner)", partition),
        el("label", {}, "Key", key)),
      el("label", {}, "Headers", headers), el("label", {}, "Value", value),
      el("p", {}, el("button", {id: "produce-submit", onclick: send}, "Produce"))),
    result);
}

// --- start -------------------------------------------------------------------------------------

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", async () => {
  route();
  try {
    const c = await api("cluster");
    document.getElementById("cluster-name").textContent =
      `cluster ${c.cluster_id || "?"} · ${c.brokers.length} broker(s) · ${c.bootstrap}`;
  } catch (e) { document.getElementById("cluster-name").textContent = "cluster unreachable: " + e.message; }
});
