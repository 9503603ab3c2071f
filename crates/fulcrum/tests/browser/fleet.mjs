// A fleet instance's dashboard in real headless Chromium while etcd is down: the banner says
// so, the Fleet tab lists every instance, and an edit is refused with the reason. Run by
// tests/peers/fleet.rs.
import { launch } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
const page = await browser.newPage();
const errors = [];
page.on("pageerror", (e) => errors.push(e.message));
try {
  await page.goto(process.env.DASHBOARD_URL);
  await page.waitForSelector("#fleet-banner:not([hidden])", { timeout: 15000 });
  assert.match(await page.textContent("#fleet-banner"), /^fleet: disconnected from etcd since .+; serving the config of revision \d+, edits are refused/);
  assert.match(await page.textContent("#file"), /^fleet \/fleet-test, instance lb-1, revision \d+/);
  assert.equal(await page.isHidden("#save"), true);

  await page.click("#tabs button[data-tab=fleet]");
  const members = await page.$$eval("#fleet-table tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  assert.deepEqual(members.map((m) => m[0]), ["lb-1", "lb-2", "lb-3"], JSON.stringify(members));
  assert.ok(members.every((m) => m[6] === "current"), JSON.stringify(members));
  assert.match(await page.textContent("#fleet-summary"), /^This instance: lb-1, running revision \d+ .*disconnected\.$/);

  await page.click("#tabs button[data-tab=servers]");
  await page.waitForSelector("#servers-table tbody tr");
  const weight = page.locator("#servers-table input.weight").first();
  await weight.fill("7");
  await page.locator("#servers-table tbody tr").first().locator("button", { hasText: "Set weight" }).click();
  await page.waitForFunction(() => document.querySelector("#message").className === "error", null, { timeout: 10000 });
  assert.match(await page.textContent("#message"), /not connected to etcd/);
  assert.deepEqual(errors, []);
  console.log("fleet dashboard: all checks passed");
} finally {
  await browser.close();
}
