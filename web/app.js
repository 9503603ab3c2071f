// Fulcrum's dashboard: live stats by polling the JSON API once a second (the Overview's charts
// keep the last 5 minutes of those polls, drawn with the vendored uPlot), traffic graphs from the
// 10 s history, and every change through the same API a script would use. No build step.
"use strict";

const $ = (sel) => document.querySelector(sel);
const ui = { service: null, stats: null, config: null, file: null, tab: "overview", graphsAt: 0, revision: null, live: {}, charts: {}, cpu: null, algorithms: [], inflight: null };

// The Overview's window: one point per poll, 5 minutes of them.
const LIVE_POINTS = 300;

// ---- API ------------------------------------------------------------------------------------

async function api(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") {
    // Changes must be JSON: the server refuses anything else, which stops cross-site forms.
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body ?? {});
    // In a fleet, an edit is based on the config as this page read it: one another instance
    // changed since is refused, not written over.
    if (ui.revision !== null) init.headers["If-Match"] = `"${ui.revision}"`;
  }
  const response = await fetch(path, init);
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    const error = typeof data === "object" && data.error ? data.error : `${response.status} ${data}`;
    throw new Error(error);
  }
  return data;
}

function say(text, ok = true) {
  const m = $("#message");
  m.textContent = text;
  m.className = ok ? "ok" : "error";
}

// Runs a change, reports the answer, and re-reads the running config.
async function change(method, path, body) {
  // The last answer goes at once, so that no one reads it as this change's.
  say("sending...");
  try {
    const answer = await api(method, path, body);
    // Said once the page shows the config it speaks of: until then the forms still hold the old
    // one, and a refill landing after someone typed would take their input away.
    await loadConfig();
    await poll();
    say(answer.message || "done");
    return true;
  } catch (e) {
    say(e.message, false);
    // A refused edit may have been based on an old config: show the one that runs now.
    if (ui.revision !== null) await loadConfig().catch(() => {});
    return false;
  }
}

// A shared pool (`[[pool]]`) is edited by its own routes; its servers' actions are a service's.
const sharedPool = () => (ui.config?.pool ?? []).find((p) => p.name === ui.service);
const svc = (suffix) => `/api/${sharedPool() ? "pools" : "services"}/${encodeURIComponent(ui.service)}${suffix}`;
const srv = (address, suffix = "") => svc(`/servers/${encodeURIComponent(address)}${suffix}`);

// Runs a server's health check at once and says its result; the table shows the new state.
async function checkNow(address) {
  try {
    const { check } = await api("POST", srv(address, "/check"));
    say(`${address}: ${check.result} (${check.took_ms} ms); ${check.state}, ${check.check_streak} toward rise/fall`, check.passed);
    await poll();
  } catch (e) {
    say(`${address}: ${e.message}`, false);
  }
}

// The connections and requests in flight on one server (the newest 64), read again at each poll
// while shown.
async function showInflight(address) {
  ui.inflight = address;
  $("#inflight").hidden = false;
  await loadInflight();
}

async function loadInflight() {
  const address = ui.inflight;
  if (!address) return;
  let r;
  try {
    r = await api("GET", srv(address, "/inflight"));
  } catch (e) {
    say(`${address}: ${e.message}`, false);
    return;
  }
  $("#inflight-server").textContent = address;
  $("#inflight-count").textContent = `${r.current} in flight, the newest ${r.shown_at_most} shown`;
  $("#inflight-table tbody").replaceChildren(...r.inflight.map((e) => el("tr", { "data-client": e.client },
    el("td", {}, e.client), el("td", { class: "num" }, `${(e.age_ms / 1000).toFixed(1)} s`),
    el("td", { class: "num" }, e.bytes === undefined ? "" : bytes(e.bytes)), el("td", { class: "request" }, e.request ?? ""))));
}

// ---- Loading --------------------------------------------------------------------------------

// A pool shows as `service/pool`: the parent's settings with the pool's servers, algorithm and check.
function serviceConfig() {
  const shared = sharedPool();
  if (shared) {
    // No listener or connection settings of its own: those are each service's.
    const mode = ui.stats?.services.find((x) => x.name === shared.name)?.mode ?? "tcp";
    const none = { listen: "", connect_timeout: "", failure_limit: "", retries: "", maxconn: "", half_close: false, terminate_on_disable: false };
    return { ...none, name: shared.name, mode, algorithm: shared.algorithm ?? "round-robin", health: shared.health ?? {}, server: shared.server };
  }
  const [name, poolName] = (ui.service ?? "").split("/");
  const s = ui.config?.service?.find((x) => x.name === name);
  if (!s || !poolName) return s;
  const p = (s.pool ?? []).find((x) => x.name === poolName);
  return p && { ...s, name: ui.service, algorithm: p.algorithm, health: p.health, server: p.server };
}

async function loadConfig() {
  const data = await api("GET", "/api/config");
  ui.config = data.config;
  ui.file = data.file;
  ui.revision = data.fleet ? data.fleet.revision : null;
  $("#file").textContent = data.fleet
    ? `fleet ${data.fleet.prefix}, instance ${data.fleet.name}, revision ${data.fleet.revision}`
    : data.file ? `config: ${data.file}` : "embedded config (Save is off)";
  renderUnsaved(data.unsaved);
  $("#save").hidden = Boolean(data.fleet);
  $("#save").disabled = !data.file;
  $("#config-reload").disabled = !data.file;
  const select = $("#service");
  const names = (ui.config.service ?? []).flatMap((s) => [s.name, ...(s.pool ?? []).map((p) => `${s.name}/${p.name}`)]).concat((ui.config.pool ?? []).map((p) => p.name));
  if (!names.includes(ui.service)) ui.service = names[0] ?? null;
  select.replaceChildren(...names.map((n) => new Option(n, n, false, n === ui.service)));
  if (document.activeElement !== $("#config-text")) $("#config-text").value = data.toml;
  fillForms();
}

// Edits made here and not saved to the file yet: a banner with them and the diff, since a reload
// (or a SIGHUP) would drop them.
function renderUnsaved(unsaved) {
  $("#unsaved-banner").hidden = !unsaved;
  if (!unsaved) return;
  const n = Math.max(unsaved.edits.length, 1);
  $("#unsaved-text").textContent = `unsaved changes: ${n} edit${n === 1 ? "" : "s"} not in the config file (${unsaved.edits.join("; ") || "the running config differs"}); a reload would drop them.`;
  $("#unsaved-diff").textContent = unsaved.diff;
}

// The History tab: the audit trail, newest first.
async function loadAudit() {
  let r;
  try {
    r = await api("GET", "/api/audit");
  } catch (e) {
    say(`cannot read the history: ${e.message}`, false);
    return;
  }
  const rows = r.records.map((a) => el("tr", { class: a.outcome === "refused" ? "state-down" : "" },
    el("td", {}, new Date(a.unix_ms).toLocaleString()), el("td", {}, a.who), el("td", {}, a.source + (a.instance ? ` (${a.instance})` : "")),
    el("td", {}, a.what), el("td", { title: a.message ?? "" }, a.outcome),
    el("td", {}, a.diff ? el("details", {}, el("summary", {}, `${a.diff.split("\n").length} lines`), el("pre", {}, a.diff)) : "")));
  $("#audit-table tbody").replaceChildren(...rows);
}

// Reload from the file; edits not saved make the server answer 409 with them, and dropping them
// takes a confirmation.
async function reloadFromFile() {
  try {
    const answer = await api("POST", "/api/reload");
    say(answer.message || "done");
  } catch (e) {
    if (!e.message.includes("unsaved edit") || !confirm(`${e.message}\n\nReload anyway and drop them?`)) {
      say(e.message, false);
      return;
    }
    await change("POST", "/api/reload?force=true");
    return;
  }
  await loadConfig();
  await poll();
}

function fillForms() {
  const s = serviceConfig();
  if (!s) return;
  // At once, not at the next poll: the rules editor must hold this service's rules before anyone
  // types into it, or the poll would take the text for another service's and replace it.
  renderRules();
  $("#lb-name").value = s.name;
  $("#lb-mode").value = s.mode + (s.data_ports ? ` (data ports ${s.data_ports})` : "");
  $("#lb-listen").value = s.listen;
  $("#lb-connect-timeout").value = s.connect_timeout;
  $("#lb-failure-limit").value = s.failure_limit;
  $("#lb-retries").value = s.retries;
  $("#lb-maxconn").value = s.maxconn;
  $("#lb-half-close").checked = s.half_close;
  $("#lb-terminate").checked = s.terminate_on_disable;
  // The algorithms that serve the service's mode, as GET /api/algorithms lists them.
  offerAlgorithms($("#algorithm"), s.mode, s.algorithm);
  $("#algorithm-current").textContent = `Running: ${s.algorithm}`;
  describeAlgorithm();
  const h = s.health;
  $("#hc-kind").value = h.kind;
  $("#hc-interval").value = h.interval;
  $("#hc-timeout").value = h.timeout;
  $("#hc-rise").value = h.rise;
  $("#hc-fall").value = h.fall;
  $("#hc-path").value = h.path;
  $("#hc-status").value = h.expect_status;
  $("#hc-expect-text").value = h.expect_text ?? "";
  // Not on the form: kept as it is when the form is sent.
  $("#health-form").dataset.grpcService = h.grpc_service ?? "";
}

// Fills `select` with the algorithms that serve `mode`, each described in its tooltip.
function offerAlgorithms(select, mode, chosen) {
  const offered = ui.algorithms.filter((a) => a.modes.includes(mode));
  select.replaceChildren(...offered.map((a) => {
    const o = new Option(a.title, a.name, false, a.name === chosen);
    o.title = a.description;
    return o;
  }));
}

// The chosen algorithm's one-line description under the Algorithm tab's form.
function describeAlgorithm() {
  const a = ui.algorithms.find((x) => x.name === $("#algorithm").value);
  $("#algorithm-about").textContent = a ? `${a.title}: ${a.description}${a.hashes ? " (hashes)" : ""}.` : "";
}

async function poll() {
  try {
    ui.stats = await api("GET", "/api/stats");
  } catch (e) {
    say(`cannot read stats: ${e.message}`, false);
    return;
  }
  recordLive();
  if (ui.tab === "overview") renderOverview();
  renderServers();
  renderAlgorithm();
  renderStats();
  renderCertificates();
  if (ui.tab === "stats") loadLimits();
  if (ui.tab === "history") loadAudit();
  renderFleet();
  renderRules();
  if (ui.tab === "graphs" && Date.now() - ui.graphsAt > 10000) loadGraphs();
  if (ui.tab === "why") loadRecent();
  if (ui.tab === "servers") loadInflight();
}

// ---- Rules --------------------------------------------------------------------------------------

// Routes belong to the service: a pool shown as `service/pool` shows its parent's.
const parentName = () => (ui.service ?? "").split("/")[0];
const ACTIONS = ["deny", "allow", "redirect", "request_headers", "strip_prefix", "replace_prefix", "rewrite_path", "set_query", "pool", "max_request_body", "error_pages", "response_headers", "compress", "limit"];
const shown = (k, v) => `${k} ${typeof v === "string" ? v : JSON.stringify(v)}`;

function renderRules() {
  const s = ui.config?.service?.find((x) => x.name === parentName());
  const routes = s?.route ?? [];
  const http = ui.stats?.services.find((x) => x.name === parentName())?.http;
  $("#rules-table tbody").replaceChildren(...routes.map((r, i) => {
    const when = Object.entries(r).filter(([k]) => !ACTIONS.includes(k)).map(([k, v]) => shown(k, v));
    const then = Object.entries(r).filter(([k]) => ACTIONS.includes(k)).map(([k, v]) => shown(k, v));
    const st = http?.routes?.[i];
    const hits = http?.route_hits?.[i] ?? 0;
    const cls = (c) => el("td", { class: "num" }, String(st?.responses?.[c] ?? 0));
    return el("tr", {},
      el("td", {}, String(i)),
      el("td", { class: "rule" }, when.join("; ") || "every request"),
      el("td", { class: "rule" }, then.join("; ") || "the default pool"),
      el("td", { class: "num" }, String(hits)), cls("2xx"), cls("3xx"), cls("4xx"), cls("5xx"),
      el("td", { class: "num" }, st?.p95_ms == null ? "-" : `${st.p95_ms} ms`));
  }));
  // The editor follows the running rules until someone edits it (or the service changes).
  const fresh = JSON.stringify(routes, null, 2);
  const box = $("#rules-text");
  if (ui.rulesFor !== parentName() || box.value === ui.rulesShown) box.value = fresh;
  ui.rulesShown = fresh;
  ui.rulesFor = parentName();
}

function serviceStats() {
  return ui.stats?.services.find((s) => s.name === ui.service);
}

// ---- Rendering ------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  e.append(...children.map((c) => (c instanceof Node ? c : String(c ?? ""))));
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function duration(secs) {
  if (secs === null || secs === undefined) return "never";
  if (secs < 60) return `${secs}s`;
  if (secs < 3600) return `${Math.floor(secs / 60)}m${secs % 60}s`;
  return `${Math.floor(secs / 3600)}h${Math.floor((secs % 3600) / 60)}m`;
}

function renderHeader(s) {
  const badge = $("#service-state");
  badge.textContent = s.shared_by ? where(s) : s.enabled ? `running on ${s.listen}` : "stopped";
  badge.className = `badge ${s.enabled ? "up" : "disabled"}`;
  $("#start").disabled = s.enabled;
  $("#stop").disabled = !s.enabled;
}

// How a server is coming back: its slow-start ramp, or why flap damping keeps it out; what its
// agent says when the agent set its state or weight.
function recovery(v) {
  if (v.agent && (v.state_by === "agent" || v.weight_by === "agent")) {
    return el("span", { class: "recovery agent", title: `agent: ${v.agent.last}` }, ` by agent: ${v.agent.state} ${v.agent.weight_percent}%`);
  }
  if (v.outlier) return el("span", { class: "recovery outlier" }, ` ${v.outlier}`);
  if (v.suppressed) return el("span", { class: "recovery suppressed" }, ` suppressed: ${v.suppressed}`);
  if (v.ramp_percent !== undefined) return el("span", { class: "recovery ramp" }, ` slow start ${v.ramp_percent}% (weight ${v.effective_weight.toFixed(2)} of ${v.weight})`);
  return "";
}

function renderServers() {
  const s = serviceStats();
  const body = $("#servers-table tbody");
  if (!s) { body.replaceChildren(); return; }
  renderHeader(s);
  const rows = s.servers.map((v) => {
    const weight = el("input", { type: "number", min: "1", max: "256", value: v.weight, class: "weight", "aria-label": `weight of ${v.address}` });
    const act = (label, state) => el("button", { type: "button", onclick: () => change("POST", srv(v.address, "/state"), { state }) }, label);
    const actions = el("td", { class: "actions" },
      v.state === "disabled" ? act("Enable", "enable") : act("Disable", "disable"),
      // An agent's drain is the agent's to end: Undrain ends an operator's.
      v.state === "drain" && v.state_by === "operator" ? act("Undrain", "enable") : act("Drain", "drain"),
      el("button", { type: "button", onclick: () => change("POST", srv(v.address, "/weight"), { weight: Number(weight.value) }) }, "Set weight"),
      el("button", { type: "button", class: "check-now", onclick: () => checkNow(v.address) }, "Check now"),
      el("button", { type: "button", class: "show-inflight", onclick: () => showInflight(v.address) }, "In flight"),
      el("button", { type: "button", class: "danger", onclick: () => confirm(`Remove ${v.address}?`) && change("DELETE", srv(v.address)) }, "Remove"));
    return el("tr", { "data-server": v.address },
      el("td", {}, v.address + (v.backup ? " (backup)" : "")),
      el("td", { class: "muted" }, v.resolved),
      el("td", {}, el("span", { class: `badge state ${v.state}` }, v.state), recovery(v)),
      el("td", {}, weight),
      el("td", { class: "num current" }, v.current),
      el("td", { class: "num total" }, v.total),
      el("td", { class: "muted" }, v.last_check),
      actions);
  });
  // Keep a weight box the user is typing in.
  if (document.activeElement?.matches("#servers-table input")) return;
  body.replaceChildren(...rows);
}

function renderAlgorithm() {
  const s = serviceStats();
  const body = $("#algorithm-table tbody");
  if (!s) return;
  const f = (x, d = 3) => (x === null || x === undefined || !Number.isFinite(x) ? "" : x.toFixed(d));
  body.replaceChildren(...s.servers.map((v) => el("tr", { "data-server": v.address },
    el("td", {}, v.address), el("td", { class: "num" }, v.weight),
    el("td", { class: "num" }, f(v.algorithm?.ratio)), el("td", { class: "num" }, f(v.algorithm?.r)),
    el("td", { class: "num" }, v.syn_sent), el("td", { class: "num" }, v.syn_acked),
    el("td", { class: "num" }, f(v.connect_ms, 2)), el("td", { class: "num" }, f(v.ewma_connect_ms, 2)))));
}

// A service's certificates (names, expiry; a warning within 14 days of it) and handshakes.
function tlsRow(tls) {
  const certs = tls.certificates.map((c) => el("span", { class: c.expiring ? "cert expiring" : "cert", title: c.file },
    `${c.names.join(", ")}: expires ${c.expires}${c.expiring ? " (within 14 days)" : ""}`));
  const failed = Object.entries(tls.failures).filter(([, n]) => n > 0).map(([why, n]) => `${n} ${why}`).join(", ");
  const handshakes = `TLS 1.3: ${tls.handshakes_tls13}, TLS 1.2: ${tls.handshakes_tls12}${failed ? `; failed: ${failed}` : ""}`;
  return el("tr", { class: "tls-row" }, el("td", { colspan: 26 }, "TLS — ", ...certs, el("span", { class: "muted handshakes" }, handshakes)));
}

// Time left before a certificate ends, in days (hours under two days).
function left(secs) {
  if (secs <= 0) return "expired";
  return secs < 2 * 86400 ? `${Math.floor(secs / 3600)} hours` : `${Math.floor(secs / 86400)} days`;
}

// The Certificates tab: every TLS service's certificates with where they come from (file or
// ACME), the ones ending within 14 days marked and counted in a warning (and on the tab's
// button), and what ACME says of one (served self-signed while none is issued, and why).
function renderCertificates() {
  const all = ui.stats.services.filter((s) => s.tls).flatMap((s) => s.tls.certificates.map((c) => ({ service: s.name, ...c })));
  const button = $("#tabs button[data-tab=certificates]");
  button.hidden = all.length === 0;
  const expiring = all.filter((c) => c.expiring);
  button.classList.toggle("warn", expiring.length > 0);
  button.textContent = expiring.length ? `Certificates (${expiring.length} expiring)` : "Certificates";
  const warning = $("#certs-warning");
  warning.hidden = expiring.length === 0;
  warning.textContent = expiring.length
    ? `${expiring.length === 1 ? "1 certificate ends" : `${expiring.length} certificates end`} within 14 days: ${expiring.map((c) => `${c.names.join(", ")} (${c.service}, ${left(c.expires_in_seconds)} left)`).join("; ")}`
    : "";
  const rows = all.flatMap((c) => {
    const row = el("tr", { class: c.expiring ? "expiring" : "", "data-names": c.names.join(","), "data-source": c.source },
      el("td", {}, c.service), el("td", { title: c.file }, c.names.join(", ")), el("td", {}, c.source === "acme" ? "ACME" : "file"),
      el("td", {}, c.issuer), el("td", {}, c.expires), el("td", { class: "left" }, left(c.expires_in_seconds)),
      el("td", {}, c.next_renewal ?? "-"));
    return c.note ? [row, el("tr", { class: "note" }, el("td", { colspan: 7 }, c.note))] : [row];
  });
  $("#certs-table tbody").replaceChildren(...rows);
}

// Where an entry takes its traffic: a service's address (and the shared pools it sends to), or,
// for a shared pool, the services that use it (one row, whichever service the traffic came in on).
function where(s) {
  if (s.shared_by) return `shared pool, used by ${s.shared_by.join(", ") || "no service"}`;
  return s.shared_pools && s.shared_pools.length ? `${s.listen} — uses ${s.shared_pools.join(", ")}` : s.listen;
}

function renderStats() {
  const body = $("#stats-table tbody");
  const rows = [];
  for (const s of ui.stats.services) {
    rows.push(el("tr", { class: "service-row" }, el("th", { colspan: 26 }, `${s.name} — ${where(s)} — ${s.algorithm}${s.enabled ? "" : " — stopped"}`)));
    if (s.tls) rows.push(tlsRow(s.tls));
    let bin = 0, bout = 0, cerr = 0, resp = 0, redis = 0;
    for (const v of s.servers) {
      bin += v.bytes_in; bout += v.bytes_out; cerr += v.connect_failures; resp += v.transfer_errors; redis += v.redispatches;
      rows.push(el("tr", { "data-server": v.address, class: `state-${v.state}` },
        el("td", {}, v.address),
        // Every mode queues per pool, not per server: the Total row holds the queue.
        ...[0, 1, 2].map(() => el("td", { class: "num muted", title: "requests wait in the pool's queue (Total row)" }, "-")),
        el("td", { class: "num" }, v.rate), el("td", { class: "num" }, v.rate_max), el("td", { class: "num" }, ""),
        el("td", { class: "num" }, v.current), el("td", { class: "num" }, v.max), el("td", { class: "num server-limit" }, v.maxconn || "-"),
        el("td", { class: "num total" }, v.total), el("td", { class: "num" }, v.lb_total), el("td", { class: "num" }, duration(v.last_use_secs)),
        el("td", { class: "num" }, bytes(v.bytes_in)), el("td", { class: "num" }, bytes(v.bytes_out)),
        el("td", { class: "num" }, v.connect_failures), el("td", { class: "num" }, v.transfer_errors),
        // Fulcrum never retries the server that failed: every retry is a redispatch.
        el("td", { class: "num" }, "-"), el("td", { class: "num" }, v.redispatches),
        el("td", {}, el("span", { class: `badge state ${v.state}` }, v.state), recovery(v)),
        el("td", { class: "muted", title: v.last_check }, `${v.last_check.split(":")[0]} (${v.last_check_ms} ms)`),
        el("td", { class: "num", title: `effective weight ${v.effective_weight.toFixed(2)}` }, v.ramp_percent === undefined ? v.weight : `${v.effective_weight.toFixed(2)}/${v.weight}`), el("td", {}, v.backup ? "Y" : "-"), el("td", { class: "num" }, duration(v.downtime_secs))));
    }
    rows.push(el("tr", { class: "total-row" },
      el("td", {}, "Total"),
      el("td", { class: "num" }, s.queue), el("td", { class: "num" }, s.queue_max), el("td", { class: "num" }, s.queue_limit),
      el("td", { class: "num" }, s.rate), el("td", { class: "num" }, s.rate_max), el("td", { class: "num session-limit" }, s.rate_limit || ""),
      el("td", { class: "num" }, s.current), el("td", { class: "num" }, s.max), el("td", { class: "num" }, s.maxconn || ""),
      el("td", { class: "num" }, s.total), el("td", { class: "num" }, ""), el("td", {}, ""),
      el("td", { class: "num" }, bytes(bin)), el("td", { class: "num" }, bytes(bout)),
      el("td", { class: "num" }, cerr), el("td", { class: "num" }, resp), el("td", { class: "num" }, "-"), el("td", { class: "num" }, s.redispatches),
      el("td", {}, s.enabled ? "OPEN" : "STOPPED"), el("td", { class: "muted" }, `${s.refused} refused`), el("td", {}, ""), el("td", {}, ""), el("td", {}, "")));
  }
  body.replaceChildren(...rows);
}

// Each limit's table with the keys closest to their limit, and a button that clears a key.
async function loadLimits() {
  const any = (ui.stats.limits ?? []).length > 0;
  $("#limits-none").hidden = any;
  $("#limits-table").hidden = !any;
  if (!any) return;
  let r;
  try {
    r = await api("GET", "/api/limits?top=5");
  } catch (e) {
    say(`cannot read limits: ${e.message}`, false);
    return;
  }
  const per = (l) => (l.count === "connections" ? "at once" : `per ${l.period_ms % 1000 ? `${l.period_ms} ms` : `${l.period_ms / 1000} s`}`);
  const rows = r.limits.map((l) => el("tr", { "data-table": l.name },
    el("td", {}, l.name), el("td", {}, l.route === undefined ? l.service : `${l.service} route ${l.route + 1}`),
    el("td", {}, `${l.count} by ${l.key}`), el("td", { class: "num" }, `${l.limit} ${per(l)}`),
    el("td", {}, l.store === "redis" ? `${l.action}, shared${l.sync && !l.sync.connected ? " (Redis unreachable)" : ""}` : l.action),
    el("td", { class: "num" }, `${l.keys}/${l.max_keys}`), el("td", { class: "num" }, l.passed), el("td", { class: "num" }, l.limited),
    el("td", { class: "num" }, l.delayed), el("td", { class: "num" }, l.logged),
    el("td", {}, ...(l.top ?? []).map((k) => el("span", { class: "limit-key", "data-key": k.key, title: k.retry_after_ms ? `over: back in ${k.retry_after_ms} ms` : "" },
      `${k.key} ${Math.round(k.used * 100)}% `,
      l.count === "connections" ? "" : el("button", { class: "small clear-key", onclick: () => change("DELETE", `/api/limits/${encodeURIComponent(l.name)}/${encodeURIComponent(k.key)}`) }, "clear"))))));
  $("#limits-table tbody").replaceChildren(...rows);
}

// ---- Graphs (MRTG style: inbound as a filled area, outbound as a line) ---------------------------

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function graph(title, points, series, windowSecs) {
  const W = 600, H = 140, L = 60, B = 20, T = 8;
  const now = Math.floor(Date.now() / 1000);
  const x = (t) => L + ((t - (now - windowSecs)) / windowSecs) * (W - L - 4);
  const max = Math.max(1, ...points.flatMap((p) => series.map((s) => s.value(p))));
  const y = (v) => H - B - (v / max) * (H - B - T);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "graph", role: "img", "aria-label": title });
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    root.append(svg("line", { x1: L, x2: W - 4, y1: y(v), y2: y(v), class: "grid" }));
    const label = svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = series[0].format(v);
    root.append(label);
  }
  for (let i = 0; i <= 6; i++) {
    const t = now - windowSecs + (windowSecs * i) / 6;
    const label = svg("text", { x: x(t), y: H - 4, "text-anchor": "middle" });
    label.textContent = new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    root.append(label);
  }
  for (const s of series) {
    if (points.length === 0) continue;
    const line = points.map((p) => `${x(p.t).toFixed(1)},${y(s.value(p)).toFixed(1)}`).join(" ");
    if (s.fill) {
      const first = x(points[0].t).toFixed(1), last = x(points[points.length - 1].t).toFixed(1);
      root.append(svg("polygon", { points: `${first},${y(0)} ${line} ${last},${y(0)}`, class: s.cls }));
    } else {
      root.append(svg("polyline", { points: line, class: s.cls }));
    }
  }
  return el("figure", {}, el("figcaption", {}, title), root);
}

async function loadGraphs() {
  ui.graphsAt = Date.now();
  const windowSecs = Number($("#graph-window").value);
  let data;
  try {
    data = await api("GET", `/api/history?service=${encodeURIComponent(ui.service)}&since=${Math.floor(Date.now() / 1000) - windowSecs}`);
  } catch (e) {
    say(`cannot read history: ${e.message}`, false);
    return;
  }
  const count = (v) => String(Math.round(v));
  const figures = data.series.map((s) => el("div", { class: "server-graphs", "data-server": s.server },
    el("h3", {}, `${s.server} — ${s.points.length} points`),
    graph(`${s.server}: connections per ${data.interval_secs} s`, s.points, [{ value: (p) => p.connections, fill: true, cls: "in", format: count }], windowSecs),
    graph(`${s.server}: bytes per ${data.interval_secs} s`, s.points, [
      { value: (p) => p.bytes_in, fill: true, cls: "in", format: bytes },
      { value: (p) => p.bytes_out, fill: false, cls: "out", format: bytes },
    ], windowSecs)));
  if (figures.length === 0) figures.push(el("p", { class: "muted" }, "No history yet: the first point comes 10 seconds after start."));
  $("#graphs").replaceChildren(...figures);
}

function clock(unixSecs) {
  return new Date(unixSecs * 1000).toLocaleString();
}

// The fleet, when this instance is in one: a banner while etcd cannot be reached or the newest
// config does not run here, and the Fleet tab's list of instances.
function renderFleet() {
  const f = ui.stats?.fleet;
  $("#tabs button[data-tab=fleet]").hidden = !f;
  const banner = $("#fleet-banner");
  const problems = [];
  if (f && !f.connected) problems.push(`fleet: disconnected from etcd since ${clock(f.since)} (${f.lost ?? "not connected yet"}); serving the config of revision ${f.revision}, edits are refused`);
  if (f?.refused) problems.push(`fleet: ${f.refused}`);
  banner.hidden = problems.length === 0;
  banner.textContent = problems.join("\n");
  if (!f) return;
  $("#fleet-summary").textContent = `This instance: ${f.name}, running revision ${f.revision} (digest ${f.digest || "none"}), ${f.connected ? `connected to etcd since ${clock(f.since)}` : "disconnected"}.`;
  const state = (m) => (m.gone_since ? ["disabled", `gone since ${clock(m.gone_since)}`] : m.lagging ? ["down", "lags"] : ["up", "current"]);
  const rows = f.members.map((m) => el("tr", { class: m.lagging || m.gone_since ? "state-down" : "" },
    el("td", {}, m.name), el("td", {}, m.admin ?? "-"), el("td", {}, m.revision), el("td", {}, m.digest),
    el("td", {}, m.version), el("td", {}, clock(m.started)),
    el("td", {}, el("span", { class: `badge ${state(m)[0]}` }, state(m)[1]))));
  $("#fleet-table tbody").replaceChildren(...rows);
}

// ---- Overview -------------------------------------------------------------------------------

// Each poll adds a point per service: requests (connections) and errors per second since the
// last poll, and each server's picks (LbTot), so the tiles show shares over the window.
function recordLive() {
  const now = Date.now() / 1000;
  for (const s of ui.stats.services) {
    const errors = s.refused + s.servers.reduce((n, v) => n + v.connect_failures + v.transfer_errors, 0);
    const l = (ui.live[s.name] ??= { t: [], req: [], err: [], last: null, picks: [], hist: [] });
    if (l.last) {
      const dt = Math.max(now - l.last.t, 0.001);
      l.t.push(now);
      l.req.push(Math.max(s.total - l.last.total, 0) / dt);
      l.err.push(Math.max(errors - l.last.errors, 0) / dt);
    }
    l.picks.push(Object.fromEntries(s.servers.map((v) => [v.address, v.lb_total])));
    if (s.http) l.hist.push(s.http.total.cumulative);
    for (const k of ["t", "req", "err", "picks", "hist"]) if (l[k].length > LIVE_POINTS) l[k].shift();
    l.last = { t: now, total: s.total, errors };
  }
}

// p50, p95 and p99 (ms) of the requests of the window: the change of the service's cumulative
// histogram from its first point to its last, read as Prometheus' histogram_quantile does.
function windowQuantiles(l, bounds) {
  if (l.hist.length < 2) return null;
  const first = l.hist[0], last = l.hist[l.hist.length - 1];
  const d = last.map((c, i) => c - first[i]);
  const count = d[d.length - 1];
  if (!(count > 0)) return null;
  const q = (p) => {
    const rank = p * count;
    const i = d.findIndex((c) => c >= rank);
    if (i < 0 || i >= bounds.length) return bounds[bounds.length - 1];
    const lo = i ? bounds[i - 1] : 0, below = i ? d[i - 1] : 0;
    return lo + (bounds[i] - lo) * Math.min(Math.max((rank - below) / Math.max(d[i] - below, 1), 0), 1);
  };
  return [0.5, 0.95, 0.99].map((p) => q(p) * 1000);
}

function renderProcess() {
  const p = ui.stats.process;
  if (p.cpu_seconds_total === undefined) return;
  const now = Date.now() / 1000;
  const cpu = ui.cpu && now > ui.cpu.t ? ((p.cpu_seconds_total - ui.cpu.cpu) / (now - ui.cpu.t)) * 100 : null;
  ui.cpu = { t: now, cpu: p.cpu_seconds_total };
  const figure = (label, value) => el("div", { class: "figure" }, el("span", { class: "muted" }, label), el("strong", {}, value));
  $("#process").replaceChildren(
    figure("uptime", duration(Math.round(p.uptime_seconds))),
    figure("CPU", cpu === null ? "…" : `${cpu.toFixed(1)}%`),
    figure("memory (RSS)", bytes(p.resident_memory_bytes)),
    figure("descriptors", `${p.open_fds} of ${p.max_fds}`),
    figure("connections", `${p.current} of ${p.maxconn}`));
}

function renderOverview() {
  renderProcess();
  const box = $("#overview");
  // A service that was deleted leaves with its chart.
  for (const card of [...box.children]) {
    if (!ui.stats.services.some((s) => card.dataset.service === s.name)) {
      ui.charts[card.dataset.service]?.destroy();
      delete ui.charts[card.dataset.service];
      card.remove();
    }
  }
  for (const s of ui.stats.services) {
    const id = `ov-${s.name.replace(/[^a-zA-Z0-9_-]/g, "_")}`;
    let card = document.getElementById(id);
    if (!card) {
      card = el("div", { class: "service-card", id, "data-service": s.name }, el("h3", {}), el("div", { class: "chart" }), el("div", { class: "tiles" }));
      box.append(card);
    }
    const l = ui.live[s.name];
    const rate = l.req.length ? l.req[l.req.length - 1] : 0;
    const qs = s.http ? windowQuantiles(l, s.http.bounds) : null;
    const times = qs ? ` — p50 ${qs[0].toFixed(1)} / p95 ${qs[1].toFixed(1)} / p99 ${qs[2].toFixed(1)} ms` : "";
    card.querySelector("h3").textContent = `${s.name} — ${where(s)} — ${s.algorithm} — ${rate.toFixed(1)}/s${times}${s.panic ? " — PANIC: no server up, using all" : ""}`;
    const data = [l.t, l.req, l.err];
    if (!ui.charts[s.name] && typeof uPlot === "function") {
      const opts = {
        width: Math.min(card.clientWidth || 640, 900), height: 160,
        scales: { x: { time: true } },
        series: [{}, { label: s.mode === "http" ? "requests/s" : "connections/s", stroke: "#1a7f37", width: 2 }, { label: "errors/s", stroke: "#cf222e", width: 2 }],
      };
      ui.charts[s.name] = new uPlot(opts, data, card.querySelector(".chart"));
    } else if (ui.charts[s.name]) {
      ui.charts[s.name].setData(data);
    }
    // Shares of the picks over the window, from the first and last LbTot seen.
    const first = l.picks[0], last = l.picks[l.picks.length - 1];
    const picked = (v) => Math.max((last[v.address] ?? 0) - (first[v.address] ?? 0), 0);
    const sum = s.servers.reduce((n, v) => n + picked(v), 0);
    card.querySelector(".tiles").replaceChildren(...s.servers.map((v) => el("div", { class: `tile ${v.state}`, "data-server": v.address, title: v.outlier ?? (v.suppressed ? `suppressed: ${v.suppressed}` : v.last_check) },
      el("strong", {}, v.address), el("span", {}, v.state + (v.ramp_percent !== undefined ? ` (slow start ${v.ramp_percent}%)` : "")),
      el("span", { class: "share" }, sum ? `${((100 * picked(v)) / sum).toFixed(0)}% of picks` : "no picks yet"))));
  }
}

// ---- Why this server? -------------------------------------------------------------------------

async function explain() {
  const q = new URLSearchParams({ service: ui.service, client: $("#why-client").value.trim() });
  for (const [k, id] of [["path", "#why-path"], ["host", "#why-host"], ["cookie", "#why-cookie"], ["sni", "#why-sni"]]) if ($(id).value.trim()) q.set(k, $(id).value.trim());
  let e;
  try {
    e = await api("GET", `/api/explain?${q}`);
  } catch (err) {
    say(err.message, false);
    return;
  }
  const out = [el("p", { class: "why-pick" }, el("strong", {}, e.pick ? `→ ${e.pick}` : "→ no server"), ` — ${e.why}`),
    el("p", { class: "muted" }, `pool ${e.pool}, ${e.algorithm}${e.panic ? ", panic mode" : ""}` + (e.key ? `; ${e.key.of} hashes to slot ${e.key.slot} (owner ${e.key.owner})` : "") +
      (e.affinity ? `; cookie ${e.affinity.cookie ?? "none"}${e.affinity.server ? ` names ${e.affinity.server}${e.affinity.usable ? "" : " (not usable)"}` : ""}` : ""))];
  if (e.routes.length) out.push(el("ul", { class: "why-routes" }, ...e.routes.map((r) => el("li", {}, `route to ${r.pool}: ${r.taken ? `taken${r.actions && r.actions.length ? ` (${r.actions.join("; ")})` : ""}` : `not taken: ${r.why_not}`}`))));
  const f = (x, d = 2) => (x === undefined || x === null ? "" : Number(x).toFixed(d));
  out.push(el("table", { id: "why-table" },
    el("thead", {}, el("tr", {}, ...["Server", "State", "Weight", "Effective", "In flight", "Maxconn", "Ratio", "EWMA ms", "Passed over because"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...e.candidates.map((c) => el("tr", { "data-server": c.address, class: c.address === e.pick ? "picked" : "" },
      el("td", {}, c.address + (c.backup ? " (backup)" : "")), el("td", {}, el("span", { class: `badge state ${c.state}` }, c.state)),
      el("td", { class: "num" }, c.weight), el("td", { class: "num" }, f(c.effective_weight) + (c.ramp_percent !== undefined ? ` (${c.ramp_percent}%)` : "")),
      el("td", { class: "num" }, c.active), el("td", { class: "num" }, c.maxconn || "-"), el("td", { class: "num" }, f(c.ratio, 3)),
      el("td", { class: "num" }, f(c.ewma_connect_ms)), el("td", { class: "muted" }, c.skipped ?? ""))))));
  $("#why").replaceChildren(...out);
}

// The data path's own last picks, with how each server was chosen (`/api/explain/recent`).
async function loadRecent() {
  let r;
  try {
    r = await api("GET", `/api/explain/recent?${new URLSearchParams({ service: ui.service, limit: 20 })}`);
  } catch (err) {
    say(err.message, false);
    return;
  }
  $("#recent-table tbody").replaceChildren(...r.picks.reverse().map((p) => el("tr", { "data-server": p.server },
    el("td", {}, p.time.slice(11, 23)), el("td", {}, p.client), el("td", {}, p.pool), el("td", {}, p.server), el("td", { class: "muted" }, p.why))));
}

// ---- Wiring ---------------------------------------------------------------------------------

function showTab(name) {
  ui.tab = name;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.id === `tab-${name}`);
  if (name === "graphs") loadGraphs();
  if (name === "why") loadRecent();
  if (name === "history") loadAudit();
  if (name === "overview" && ui.stats) renderOverview();
}

const numberOrNull = (v) => (v === "" ? null : Number(v));

function wire() {
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("#service").addEventListener("change", (e) => { ui.service = e.target.value; ui.inflight = null; $("#inflight").hidden = true; fillForms(); poll(); if (ui.tab === "graphs") loadGraphs(); });
  $("#graph-window").addEventListener("change", loadGraphs);
  $("#start").addEventListener("click", () => change("POST", svc("/start")));
  $("#inflight-close").addEventListener("click", () => { ui.inflight = null; $("#inflight").hidden = true; });
  $("#stop").addEventListener("click", () => change("POST", svc("/stop")));
  $("#save").addEventListener("click", () => change("POST", "/api/save"));
  $("#rules-apply").addEventListener("click", () => {
    let routes;
    try {
      routes = JSON.parse($("#rules-text").value);
    } catch (e) {
      say(`the rules are not JSON: ${e.message}`, false);
      return;
    }
    const applied = change("POST", `/api/services/${encodeURIComponent(parentName())}/routes`, routes);
    // Once applied, the editor shows the rules as they now run.
    applied.then((ok) => { if (ok) { ui.rulesFor = null; renderRules(); } });
  });
  $("#lb-form").addEventListener("submit", (e) => {
    e.preventDefault();
    change("POST", svc("/settings"), {
      listen: $("#lb-listen").value,
      connect_timeout: $("#lb-connect-timeout").value,
      failure_limit: numberOrNull($("#lb-failure-limit").value),
      retries: numberOrNull($("#lb-retries").value),
      maxconn: numberOrNull($("#lb-maxconn").value),
      half_close: $("#lb-half-close").checked,
      terminate_on_disable: $("#lb-terminate").checked,
    });
  });
  $("#add-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const ok = await change("POST", svc("/servers"), {
      address: $("#add-address").value.trim(),
      weight: Number($("#add-weight").value || 1),
      backup: $("#add-backup").checked,
    });
    if (ok) $("#add-address").value = "";
  });
  $("#algorithm-form").addEventListener("submit", (e) => {
    e.preventDefault();
    change("POST", svc("/algorithm"), { algorithm: $("#algorithm").value });
  });
  $("#health-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("#hc-expect-text").value;
    change("POST", svc("/health"), {
      kind: $("#hc-kind").value,
      interval: $("#hc-interval").value,
      timeout: $("#hc-timeout").value,
      rise: Number($("#hc-rise").value),
      fall: Number($("#hc-fall").value),
      path: $("#hc-path").value,
      expect_status: Number($("#hc-status").value),
      expect_text: text === "" ? null : text,
      grpc_service: $("#health-form").dataset.grpcService ?? "",
    });
  });
  const toml = () => ({ toml: $("#config-text").value });
  $("#config-validate").addEventListener("click", async () => {
    try { say((await api("POST", "/api/config/validate", toml())).message); } catch (e) { say(e.message, false); }
  });
  $("#config-apply").addEventListener("click", () => change("POST", "/api/config", toml()));
  $("#config-reload").addEventListener("click", reloadFromFile);
  $("#unsaved-save").addEventListener("click", () => change("POST", "/api/save"));
  $("#why-form").addEventListener("submit", (e) => { e.preventDefault(); explain(); });
  $("#algorithm").addEventListener("change", describeAlgorithm);
  $("#ns-mode").addEventListener("change", () => offerAlgorithms($("#ns-algorithm"), $("#ns-mode").value, $("#ns-algorithm").value));
  $("#lb-delete").addEventListener("click", async () => {
    if (!confirm(`Delete service ${ui.service}? Its listener closes.`)) return;
    if (await change("DELETE", `/api/services/${encodeURIComponent(ui.service)}`)) ui.service = null;
  });
  $("#new-service").addEventListener("submit", async (e) => {
    e.preventDefault();
    const rule = {
      name: $("#ns-name").value.trim(),
      listen: $("#ns-listen").value.trim(),
      mode: $("#ns-mode").value,
      algorithm: $("#ns-algorithm").value,
      half_close: $("#ns-half-close").checked,
      terminate_on_disable: $("#ns-terminate").checked,
      health: { kind: $("#ns-check").value },
      server: $("#ns-servers").value.split(",").map((a) => a.trim()).filter(Boolean).map((address) => ({ address })),
    };
    if ($("#ns-connect-timeout").value.trim()) rule.connect_timeout = $("#ns-connect-timeout").value.trim();
    if ($("#ns-failure-limit").value !== "") rule.failure_limit = Number($("#ns-failure-limit").value);
    if (await change("POST", "/api/services", rule)) {
      ui.service = rule.name;
      await loadConfig();
      $("#new-service").reset();
    }
  });
  $("#config-upload").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    $("#config-text").value = await file.text();
    try { say(`${file.name}: ${(await api("POST", "/api/config/validate", toml())).message}`); } catch (err) { say(`${file.name}: ${err.message}`, false); }
  });
}

async function main() {
  wire();
  try {
    ui.algorithms = await api("GET", "/api/algorithms");
    offerAlgorithms($("#ns-algorithm"), $("#ns-mode").value, "round-robin");
  } catch (e) {
    say(`cannot read the algorithms: ${e.message}`, false);
  }
  try {
    await loadConfig();
  } catch (e) {
    say(`cannot read the config: ${e.message}`, false);
  }
  await poll();
  setInterval(poll, 1000);
}

main();
