// The Stats tab in real headless Chromium shows a TLS service's certificates with their expiry,
// the one within 14 days of it marked, and the handshakes. Run by tests/browser/dashboard.rs.
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
  assert.deepEqual(errors, []);
  console.log("certificates: all checks passed");
} finally {
  await browser.close();
}
