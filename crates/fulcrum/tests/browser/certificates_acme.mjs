// The Certificates tab in real headless Chromium with an ACME certificate whose CA cannot be
// reached: its row says ACME, and the line under it says that a self-signed certificate serves
// while none is issued, and why. Run by tests/browser/dashboard.rs.
import { launch, dashboardPage } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
const { page, errors } = await dashboardPage(browser);
try {
  await page.goto(process.env.DASHBOARD_URL);
  await page.click("#tabs button[data-tab=certificates]");
  await page.waitForSelector("#certs-table tbody tr[data-source=acme]", { timeout: 15000 });
  const row = await page.$eval("#certs-table tbody tr[data-source=acme]", (r) => [...r.cells].map((c) => c.textContent));
  assert.deepEqual(row.slice(0, 3), ["secure", "a.acme.test", "ACME"]);
  // The note comes once the first order has failed: it names the failure.
  await page.waitForFunction(() => /last error/.test(document.querySelector("#certs-table tbody tr.note")?.textContent ?? ""), null, { timeout: 30000 });
  const note = await page.$eval("#certs-table tbody tr.note", (r) => r.textContent);
  assert.match(note, /^self-signed/);
  assert.deepEqual(errors, []);
  console.log("certificates_acme: all checks passed");
} finally {
  await browser.close();
}
