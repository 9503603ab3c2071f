// HTTP/3 in real headless Chromium: told to speak QUIC to the site's origin at once
// (--origin-to-force-quic-on) and to trust its self-signed certificate by the hash of its key
// (QUIC takes no "ignore HTTPS errors"), it loads the page and a resource of it over HTTP/3, as
// the Navigation and Resource Timing entries say. Run by tests/browser/http3.rs.
import { launch } from "./chromium.mjs";
import assert from "node:assert/strict";

const { SITE_HOST: host, SITE_PORT: port, SPKI: spki } = process.env;
const browser = await launch([
  `--origin-to-force-quic-on=${host}:${port}`,
  `--host-resolver-rules=MAP ${host} 127.0.0.1`,
  `--ignore-certificate-errors-spki-list=${spki}`,
]);
try {
  const page = await browser.newPage();
  const landed = await page.goto(`https://${host}:${port}/index.html`);
  assert.equal(landed.status(), 200);
  const protocol = await page.evaluate(() => performance.getEntries()[0].nextHopProtocol);
  assert.equal(protocol, "h3", "the page came over HTTP/3");
  assert.equal(await page.textContent("h1"), "Over QUIC");
  const [status, text, resource] = await page.evaluate(async () => {
    const r = await fetch("/name");
    const text = await r.text();
    const entry = performance.getEntriesByType("resource").find((e) => e.name.endsWith("/name"));
    return [r.status, text, entry && entry.nextHopProtocol];
  });
  assert.equal(status, 200);
  assert.equal(text.trim(), "q1");
  assert.equal(resource, "h3", "the page's fetch went over HTTP/3 too");
  console.log("http3: all checks passed");
} finally {
  await browser.close();
}
