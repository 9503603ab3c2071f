// Per-client limits and outlier detection as the dashboard shows them, in real headless
// Chromium: the Stats tab's limits table lists the client at its limit first, its "clear" button
// forgets it, the session-rate Limit cell names the limit, and the Real Servers tab says why a
// server was ejected. Run by tests/browser/protection.rs, which makes the traffic.
import { launch, dashboardPage } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
const { page, errors } = await dashboardPage(browser);
const limited = process.env.LIMITED;
try {
  await page.goto(process.env.DASHBOARD_URL);
  await page.click("#tabs button[data-tab=stats]");
  const row = page.locator('#limits-table tr[data-table="slow"]');
  await row.waitFor({ timeout: 15000 });
  assert.match(await row.textContent(), /requests by client/);
  const key = row.locator(`.limit-key[data-key="${limited}"]`);
  await key.waitFor({ timeout: 15000 });
  assert.match(await key.textContent(), /\d+%/, "its share of the limit is shown");
  assert.equal(await page.textContent("#stats-table .total-row .session-limit"), "3/1m per client");
  await key.locator("button.clear-key").click();
  await page.waitForFunction((k) => document.querySelector("#message").textContent.includes(`${k} cleared from slow`), limited, { timeout: 10000 });
  await page.waitForFunction((k) => !document.querySelector(`#limits-table .limit-key[data-key="${k}"]`), limited, { timeout: 10000 });
  console.log("protection: the key was cleared from the limits table");
  await page.click("#tabs button[data-tab=servers]");
  const ejected = page.locator(`#servers-table tr[data-server="${process.env.EJECTED}"]`);
  await ejected.waitFor({ timeout: 15000 });
  await page.waitForFunction((s) => /ejected: 2 consecutive 5xx answers \(the last 503\)/.test(document.querySelector(`#servers-table tr[data-server="${s}"]`).textContent), process.env.EJECTED, { timeout: 10000 });
  assert.deepEqual(errors, [], "no script errors");
  console.log("protection: all checks passed");
} finally {
  await browser.close();
}
