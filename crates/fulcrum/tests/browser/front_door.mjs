// A site's front door in real headless Chromium: a plain-HTTP address redirects to HTTPS (the
// browser follows it to the page, which comes compressed and renders whole), and a path whose
// servers are all gone shows the site's own error page. Run by tests/browser/front_door.rs.
import { launch } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
// The site's certificate is self-signed: the browser is told to take it.
const context = await browser.newContext({ ignoreHTTPSErrors: true });
const page = await context.newPage();
try {
  const landed = await page.goto(`${process.env.PLAIN_URL}/index.html`);
  assert.equal(page.url(), `${process.env.SECURE_URL}/index.html`, "the redirect to HTTPS was followed");
  assert.equal(landed.status(), 200);
  const hsts = (await landed.allHeaders())["strict-transport-security"];
  assert.equal(hsts, "max-age=3600");
  const headers = await landed.allHeaders();
  assert.ok(["zstd", "br", "gzip"].includes(headers["content-encoding"]), `compressed: ${JSON.stringify(headers)}`);
  assert.match(headers["vary"] ?? "", /Accept-Encoding/);
  assert.equal(await page.locator("li").count(), 300, "the whole page was decoded and rendered");
  assert.equal(await page.textContent("li:last-child"), "item 300");
  console.log(`front door: the page came as ${headers["content-encoding"]}`);
  const down = await page.goto(`${process.env.SECURE_URL}/down/`);
  assert.equal(down.status(), 502);
  assert.equal(await page.textContent("h1"), "We will be right back");
  assert.equal(await page.evaluate(() => document.contentType), "text/html");
  console.log("front door: all checks passed");
} finally {
  await browser.close();
}
