// The Stats tab in real headless Chromium shows a TLS service's certificates with their expiry,
// the one within 14 days of it marked, and the handshakes; the Certificates tab lists them with
// their source, issuer and time left, and warns of the one near its end. Run by
// tests/browser/dashboard.rs.
import { launch } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
const page = await browser.newPage();
const errors = [];
page.on("pageerror", (e) => errors.push(e.message));
try {
  await page.goto(process.env.DASHBOARD_URL);
  await page.click("#tabs button[data-tab=stats]");
  await page.waitForSelector("#stats-table tr.tls-row", { timeout: 15000 });
  const certs = await page.$$eval("#stats-table tr.tls-row .cert", (c) => c.map((e) => ({ text: e.textContent, expiring: e.classList.contains("expiring") })));
  assert.equal(certs.length, 2, JSON.stringify(certs));
  assert.match(certs[0].text, /^a\.test, \*\.wild\.test: expires \d{4}-\d\d-\d\dT/);
  assert.equal(certs[0].expiring, false);
  assert.match(certs[1].text, /^soon\.test: expires .*\(within 14 days\)$/);
  assert.equal(certs[1].expiring, true);
  await page.waitForFunction(() => /TLS 1\.3: [1-9]/.test(document.querySelector("#stats-table tr.tls-row .handshakes").textContent), null, { timeout: 15000 });

  // The Certificates tab: its button says one expires soon; a row per certificate with its
  // source and issuer, the one near its end marked and named in the warning.
  const button = "#tabs button[data-tab=certificates]";
  await page.waitForFunction((b) => document.querySelector(b).textContent === "Certificates (1 expiring)", button, { timeout: 15000 });
  assert.equal(await page.$eval(button, (b) => b.classList.contains("warn")), true);
  await page.click(button);
  await page.waitForSelector("#tab-certificates.active #certs-table tbody tr", { timeout: 15000 });
  const rows = await page.$$eval("#certs-table tbody tr", (rs) => rs.map((r) => ({
    cells: [...r.cells].map((c) => c.textContent), expiring: r.classList.contains("expiring"),
  })));
  assert.equal(rows.length, 2, JSON.stringify(rows));
  assert.deepEqual(rows[0].cells.slice(0, 3), ["secure", "a.test, *.wild.test", "file"]);
  assert.match(rows[0].cells[3], /rcgen|CN=/);
  assert.match(rows[0].cells[5], /^(59|60) days$/);
  assert.equal(rows[0].cells[6], "-");
  assert.equal(rows[0].expiring, false);
  assert.deepEqual(rows[1].cells.slice(0, 3), ["secure", "soon.test", "file"]);
  assert.match(rows[1].cells[5], /^[45] days$/);
  assert.equal(rows[1].expiring, true);
  const warning = await page.$eval("#certs-warning", (w) => ({ hidden: w.hidden, text: w.textContent }));
  assert.equal(warning.hidden, false);
  assert.match(warning.text, /^1 certificate ends within 14 days: soon\.test \(secure, [45] days left\)$/);
  assert.deepEqual(errors, []);
  console.log("certificates: all checks passed");
} finally {
  await browser.close();
}
