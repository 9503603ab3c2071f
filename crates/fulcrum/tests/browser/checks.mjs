// A server's Check now button and its In flight view, in real headless Chromium: pressing Check
// now says the check's result, and In flight lists the slow request the test holds open, with
// its client and request line. Run by tests/browser/checks.rs, which holds the request.
import { launch, dashboardPage } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
const { page, errors } = await dashboardPage(browser);
const server = process.env.SERVER;
try {
  await page.goto(process.env.DASHBOARD_URL);
  await page.click("#tabs button[data-tab=servers]");
  const row = page.locator(`#servers-table tr[data-server="${server}"]`);
  await row.waitFor({ timeout: 15000 });
  await row.locator("button.check-now").click();
  await page.waitForFunction((s) => document.querySelector("#message").textContent.startsWith(`${s}: pass: GET / answered 200`), server, { timeout: 10000 });
  assert.equal(await page.getAttribute("#message", "class"), "ok");
  console.log("checks: Check now said the check passed");
  await page.locator(`#servers-table tr[data-server="${server}"] button.show-inflight`).click();
  const held = page.locator(`#inflight-table tr[data-client="${process.env.CLIENT}"]`);
  await held.waitFor({ timeout: 10000 });
  assert.equal(await held.locator("td.request").textContent(), "GET /slow/60000 HTTP/1.1");
  assert.match(await page.textContent("#inflight-count"), /^1 in flight, the newest 64 shown$/);
  console.log("checks: In flight lists the held request");
  assert.deepEqual(errors, [], "no script errors");
  console.log("checks: all checks passed");
} finally {
  await browser.close();
}
