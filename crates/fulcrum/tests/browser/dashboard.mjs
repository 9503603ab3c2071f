// The dashboard in real headless Chromium, as a user drives it: four servers with rising counters,
// disable one and watch its state and traffic change, switch the algorithm (from the list the API
// gives), edit the health check's
// expected text, save, and find the change in the config file. Screenshots of every tab go to
// $ARTIFACTS. Run by tests/browser/dashboard.rs, which starts Fulcrum, the real servers and the traffic.
import { launch } from "./chromium.mjs";
import { readFileSync, mkdirSync } from "node:fs";
import assert from "node:assert/strict";

const url = process.env.DASHBOARD_URL;
const configPath = process.env.CONFIG_PATH;
const artifacts = process.env.ARTIFACTS;
mkdirSync(artifacts, { recursive: true });

const browser = await launch();
const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
const errors = [];
page.on("pageerror", (e) => errors.push(e.message));
// The refused change below logs its 422 as a failed resource; anything else is a fault.
page.on("console", (m) => { if (m.type() === "error" && !m.text().includes("status of 422")) errors.push(m.text()); });
const step = (text) => console.log(`dashboard: ${text}`);
const shot = (name) => page.screenshot({ path: `${artifacts}/${name}.png`, fullPage: true });
const tab = (name) => page.click(`#tabs button[data-tab=${name}]`);

// Totals per server as the Real Servers table shows them.
async function totals() {
  return page.$$eval("#servers-table tbody tr", (rows) =>
    Object.fromEntries(rows.map((r) => [r.dataset.server, Number(r.querySelector("td.total").textContent)])));
}

async function stateOf(server) {
  return page.textContent(`#servers-table tr[data-server="${server}"] .state`);
}

try {
  await page.goto(url);
  // The Overview is the landing page: a live chart (uPlot's canvas) and a tile per server whose
  // share of the picks shows once traffic has been seen.
  await page.waitForSelector("#tab-overview.active .service-card .chart canvas", { timeout: 15000 });
  // The first refresh may have seen only a few picks (three of them: 33, 33, 33 and 0): round
  // robin's even shares show once the tiles have seen a few seconds of traffic.
  const even = () => {
    const shares = [...document.querySelectorAll("#overview .tile .share")].filter((t) => t.textContent.endsWith("% of picks")).map((e) => parseInt(e.textContent, 10));
    return shares.length === 4 && Math.abs(shares.reduce((a, b) => a + b, 0) - 100) <= 2 && shares.every((p) => p > 10);
  };
  await page.waitForFunction(even, null, { timeout: 15000 }).catch(() => {});
  const shares = await page.$$eval("#overview .tile .share", (t) => t.map((e) => parseInt(e.textContent, 10)));
  assert.ok(shares.length === 4 && Math.abs(shares.reduce((a, b) => a + b, 0) - 100) <= 2 && shares.every((p) => p > 10), `round robin shares: ${shares}`);
  const figures = await page.textContent("#process");
  assert.match(figures, /uptime.*CPU.*memory \(RSS\).*descriptors\d+ of \d+/s);
  await page.waitForTimeout(2500);
  const points = await page.evaluate(() => Object.values(ui.live)[0].req.length);
  assert.ok(points >= 3, `a point a second: ${points}`);
  await shot("overview");
  step(`overview: shares ${shares}, ${points} points`);
  await tab("servers");
  await page.waitForFunction(() => document.querySelectorAll("#servers-table tbody tr .state.up").length === 4, null, { timeout: 15000 });
  step("four servers up");
  const first = await totals();
  const servers = Object.keys(first).sort();
  assert.equal(servers.length, 4);
  await page.waitForTimeout(3000);
  const second = await totals();
  for (const s of servers) assert.ok(second[s] > first[s], `counter of ${s} rises: ${first[s]} -> ${second[s]}`);
  step(`counters rise: ${JSON.stringify(first)} -> ${JSON.stringify(second)}`);
  await shot("real-servers");

  // Disable one server from its row.
  const victim = servers[0];
  await page.click(`#servers-table tr[data-server="${victim}"] button:has-text("Disable")`);
  await page.waitForFunction((s) => document.querySelector(`#servers-table tr[data-server="${s}"] .state`)?.textContent === "disabled", victim, { timeout: 5000 });
  assert.equal(await stateOf(victim), "disabled");
  await page.waitForTimeout(1500);
  const third = await totals();
  await page.waitForTimeout(3000);
  const fourth = await totals();
  assert.equal(fourth[victim], third[victim], `a disabled server takes no new connections: ${third[victim]} -> ${fourth[victim]}`);
  for (const s of servers.slice(1)) assert.ok(fourth[s] > third[s], `${s} takes the traffic`);
  step(`${victim} disabled: its total stays at ${fourth[victim]}, the others go on`);
  await shot("real-servers-disabled");

  // The algorithms offered are GET /api/algorithms' for the service's mode (TCP here: no
  // HTTP-only ones), each with its description; then switch it.
  await tab("algorithm");
  const listed = await page.evaluate(async () => (await (await fetch("/api/algorithms")).json()).filter((a) => a.modes.includes("tcp")).map((a) => a.name));
  const offered = await page.$$eval("#algorithm option", (os) => os.map((o) => o.value));
  assert.deepEqual(offered, listed);
  assert.ok(listed.includes("passive-ratio") && !listed.includes("uri-hash"), `${listed}`);
  assert.match(await page.getAttribute("#algorithm option[value=source-hash]", "title"), /Maglev/);
  await page.selectOption("#algorithm", "least-conn");
  assert.match(await page.textContent("#algorithm-about"), /fewest connections in flight/);
  await page.click("#algorithm-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#message").textContent.includes("config applied"), null, { timeout: 5000 });
  assert.match(await page.textContent("#algorithm-current"), /least-conn/);
  step("algorithm switched to least-conn");
  await shot("algorithm");

  // Edit the health check's expected text.
  await tab("keepalive");
  await page.fill("#hc-expect-text", "TARGET b");
  await page.click("#health-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#message").textContent.includes("config applied"), null, { timeout: 5000 });
  step("expected text set to 'TARGET b'");
  await shot("keepalive");

  // An invalid value is refused with the reason, and shown.
  await page.fill("#hc-interval", "soon");
  await page.click("#health-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#message.error")?.textContent.includes("invalid duration"), null, { timeout: 5000 });
  step(`refused: ${(await page.textContent("#message")).split("\n")[0]}`);

  // The edits are not in the file yet: the banner says so, with the diff.
  assert.equal(await page.isVisible("#unsaved-banner"), true);
  assert.match(await page.textContent("#unsaved-text"), /unsaved changes: \d+ edits not in the config file \(.*algorithm/);
  assert.match(await page.textContent("#unsaved-diff"), /\+algorithm = "least-conn"/);
  step(`banner: ${(await page.textContent("#unsaved-text")).slice(0, 60)}...`);

  // Save, and find the changes in the file.
  await page.click("#save");
  await page.waitForFunction(() => document.querySelector("#message").textContent.includes("saved to"), null, { timeout: 5000 });
  await page.waitForFunction(() => document.querySelector("#unsaved-banner").hidden, null, { timeout: 5000 });
  const saved = readFileSync(configPath, "utf8");
  assert.match(saved, /algorithm = "least-conn"/);
  assert.match(saved, /expect_text = "TARGET b"/);
  assert.match(saved, new RegExp(`address = "${victim}"\\s*\\n(weight = \\d+\\s*\\n)?(backup = false\\s*\\n)?enabled = false`));
  step(`saved to ${configPath}: algorithm, expected text and the disabled server are in the file`);

  // The History tab: every edit above and who made it, from the start on.
  await tab("history");
  await page.waitForFunction(() => document.querySelectorAll("#audit-table tbody tr").length >= 5, null, { timeout: 5000 });
  const history = await page.$$eval("#audit-table tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  assert.match(history[0][3], /^save to /);
  assert.ok(history.some((r) => /^algorithm LeastConn for web/i.test(r[3]) && r[4] === "applied"), JSON.stringify(history));
  assert.ok(history.some((r) => /^start with /.test(r[3]) && r[2] === "file"), JSON.stringify(history));
  step(`history: ${history.length} records, the newest "${history[0][3]}"`);
  await shot("history");

  // The remaining tabs, for the record; the traffic graph has its first point after 10 s.
  await tab("lb");
  assert.equal(await page.inputValue("#lb-name"), "web");
  await shot("server-lb");
  await tab("stats");
  const statsRows = await page.$$eval("#stats-table tbody tr[data-server]", (r) => r.length);
  assert.equal(statsRows, 4);
  const limits = await page.$$eval("#stats-table td.server-limit", (c) => c.map((e) => e.textContent).sort());
  assert.deepEqual(limits, ["-", "-", "-", "50"], "each server's session limit is its maxconn");
  await shot("stats");
  await tab("graphs");
  await page.waitForSelector("#graphs svg.graph polygon", { state: "attached", timeout: 20000 });
  const graphs = await page.$$eval("#graphs .server-graphs", (g) => g.length);
  assert.equal(graphs, 4);
  await shot("graphs");
  // A new service from the Server LB tab: it serves, shows on the Overview, and is deleted again.
  await tab("lb");
  await page.fill("#ns-name", "api");
  await page.fill("#ns-listen", process.env.NEW_LISTEN);
  await page.selectOption("#ns-mode", "http");
  await page.fill("#ns-servers", process.env.NEW_SERVER);
  await page.selectOption("#ns-check", "none");
  await page.click("#new-service button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#message").textContent.includes("config applied"), null, { timeout: 10000 });
  // The page then selects the new service, once it has read the config again.
  await page.waitForFunction(() => document.querySelector("#service").value === "api", null, { timeout: 5000 });
  const served = await page.evaluate(async (at) => (await fetch(`/api/explain?service=api&client=127.0.0.1`)).json(), process.env.NEW_LISTEN);
  assert.equal(served.pick, process.env.NEW_SERVER);
  await tab("overview");
  await page.waitForSelector('#overview .service-card[data-service="api"] canvas', { timeout: 5000 });
  // Its rules, edited in the Rules tab: a broken rule is refused with its place, a good one runs
  // and is listed with what it does.
  await tab("rules");
  assert.equal(await page.inputValue("#rules-text"), "[]");
  await page.fill("#rules-text", JSON.stringify([{ path_prefix: ["/closed"], deny: 700 }]));
  await page.click("#rules-apply");
  await page.waitForFunction(() => document.querySelector("#message.error")?.textContent.includes("route[0]"), null, { timeout: 5000 });
  assert.match(await page.textContent("#message"), /deny/);
  await page.fill("#rules-text", JSON.stringify([{ path_prefix: ["/closed"], deny: 403 }, { path: ["/old"], redirect: { status: 308, path: "/new" } }]));
  await page.click("#rules-apply");
  await page.waitForFunction(() => document.querySelectorAll("#rules-table tbody tr").length === 2, null, { timeout: 10000 });
  assert.match(await page.textContent("#rules-table tbody tr:first-child"), /path_prefix \["\/closed"\].*deny 403/);
  const denied = await page.evaluate(async () => (await fetch(`/api/explain?service=api&client=127.0.0.1&path=/closed/x`)).json());
  assert.ok(denied.routes[0].taken && denied.routes[0].actions.includes("deny 403"), JSON.stringify(denied.routes));
  await shot("rules");
  step("rules: a broken one refused at route[0], two applied and listed, explain sees the deny");
  await tab("lb");
  page.once("dialog", (d) => d.accept());
  await page.click("#lb-delete");
  await page.waitForFunction(() => ![...document.querySelectorAll("#service option")].some((o) => o.value === "api"), null, { timeout: 10000 });
  await tab("overview");
  await page.waitForFunction(() => !document.querySelector('#overview .service-card[data-service="api"]'), null, { timeout: 5000 });
  await page.selectOption("#service", "web");
  await page.dispatchEvent("#service", "change");
  step("a service created from the Server LB tab, seen on the Overview, deleted");

  // Upload a config file: it is validated, and a broken one says where.
  await tab("config");
  const running = await page.inputValue("#config-text");
  await page.setInputFiles("#config-upload", { name: "broken.toml", mimeType: "text/plain", buffer: Buffer.from(running.replace("least-conn", "fastest")) });
  await page.waitForFunction(() => document.querySelector("#message").textContent.startsWith("broken.toml:"), null, { timeout: 5000 });
  assert.match(await page.textContent("#message"), /broken\.toml: .*fastest/s);
  assert.match(await page.inputValue("#config-text"), /fastest/);
  await page.setInputFiles("#config-upload", { name: "good.toml", mimeType: "text/plain", buffer: Buffer.from(running) });
  await page.waitForFunction(() => document.querySelector("#message").textContent.startsWith("good.toml:"), null, { timeout: 5000 });
  assert.equal(await page.getAttribute("#message", "class"), "ok");
  step("an uploaded config is validated: the broken one refused with its error, the good one passes");

  // Why this server? The explained pick is one of the servers in rotation, the disabled one is
  // passed over with its reason.
  await tab("why");
  await page.fill("#why-client", "127.0.0.99");
  await page.click("#why-form button[type=submit]");
  await page.waitForSelector("#why-table tbody tr", { timeout: 5000 });
  assert.equal(await page.$$eval("#why-table tbody tr", (r) => r.length), 4);
  assert.match(await page.textContent(".why-pick"), /→ 127\.0\.0\.1:\d+ — .*fewest connections in flight/);
  assert.equal(await page.textContent(`#why-table tr[data-server="${victim}"] td:last-child`), "disabled");
  // The traffic's own picks are listed with how each was made, never on the disabled server.
  await page.waitForSelector("#recent-table tbody tr", { timeout: 5000 });
  assert.match(await page.textContent("#recent-table tbody tr td:last-child"), /^least-conn/);
  await page.waitForFunction((v) => ![...document.querySelectorAll("#recent-table tbody tr")].some((r) => r.dataset.server === v), victim, { timeout: 5000 });
  await shot("why");
  step("why: the pick, the disabled server's reason and the recent picks");
  await tab("config");
  assert.match(await page.inputValue("#config-text"), /least-conn/);
  await shot("config");

  assert.deepEqual(errors, [], "no script errors in the page");
  step("all checks passed");
} catch (e) {
  await shot("failure").catch(() => {});
  console.error(e);
  process.exitCode = 1;
} finally {
  await browser.close();
}
