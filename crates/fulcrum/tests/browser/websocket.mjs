// A WebSocket in real headless Chromium over the HTTP/2 connection its page came on (RFC 8441):
// the page loads over HTTPS and HTTP/2, then opens a WebSocket to the same origin and gets its
// messages echoed. Run by tests/browser/websocket.rs, which checks in Fulcrum's access log that
// the WebSocket came as an HTTP/2 extended CONNECT.
import { launch } from "./chromium.mjs";
import assert from "node:assert/strict";

const browser = await launch();
// The site's certificate is self-signed: the browser is told to take it.
const context = await browser.newContext({ ignoreHTTPSErrors: true });
const page = await context.newPage();
try {
  const landed = await page.goto(`${process.env.SECURE_URL}/index.html`);
  assert.equal(landed.status(), 200);
  const protocol = await page.evaluate(() => performance.getEntriesByType("navigation")[0].nextHopProtocol);
  assert.equal(protocol, "h2", "the page came over HTTP/2");
  const echoed = await page.evaluate(async (url) => {
    const ws = new WebSocket(url);
    const got = [];
    await new Promise((resolve, reject) => {
      ws.onopen = () => ["one", "two", "three"].forEach((m) => ws.send(m));
      ws.onmessage = (e) => { got.push(e.data); if (got.length === 3) resolve(); };
      ws.onerror = () => reject(new Error("the WebSocket failed"));
      setTimeout(() => reject(new Error(`no echo within 10 s: ${JSON.stringify(got)}`)), 10000);
    });
    ws.close();
    return got;
  }, `${process.env.SECURE_URL.replace("https:", "wss:")}/ws/chat`);
  assert.deepEqual(echoed, ["one", "two", "three"]);
  console.log("websocket: all checks passed");
} finally {
  await browser.close();
}
