// A shared pool (`[[pool]]`) in the dashboard, in real headless Chromium: the Stats tab shows it
// as one entry naming the services that use it, and the Real Servers tab, with the pool chosen,
// disables one of its servers. Run by tests/browser/shared_pools.rs, which checks that both
// services then send their traffic to the other server.
import { launch, dashboardPage } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
const { page, errors } = await dashboardPage(browser);
const disabled = process.env.DISABLED;
try {
  await page.goto(process.env.DASHBOARD_URL);
  await page.click("#tabs button[data-tab=stats]");
  await page.waitForFunction(() => [...document.querySelectorAll("#stats-table .service-row")].some((r) => r.textContent.startsWith("back — shared pool, used by web, raw")), null, { timeout: 15000 });
  const heads = await page.$$eval("#stats-table .service-row", (rows) => rows.map((r) => r.textContent));
  assert.equal(heads.filter((h) => h.startsWith("back")).length, 1, `one entry for the pool: ${heads}`);
  assert.ok(heads.some((h) => h.startsWith("web") && h.includes("uses back")), `the service names its pool: ${heads}`);
  console.log("shared pools: one stats entry, naming its services");
  await page.selectOption("#service", "back");
  await page.click("#tabs button[data-tab=servers]");
  const row = page.locator(`#servers-table tr[data-server="${disabled}"]`);
  await row.waitFor({ timeout: 15000 });
  await row.locator("button", { hasText: "Disable" }).click();
  await page.waitForFunction((s) => document.querySelector(`#servers-table tr[data-server="${s}"] .state`)?.textContent === "disabled", disabled, { timeout: 10000 });
  assert.deepEqual(errors, [], "no script errors");
  console.log("shared pools: all checks passed");
} finally {
  await browser.close();
}
