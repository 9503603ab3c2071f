// The system's Chromium, headless, as every browser test here runs it (playwright-core drives
// it; no browser is downloaded).
import { chromium } from "playwright-core";

export function launch(extra = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking", "--no-first-run", ...extra],
  });
}

// A page at the dashboard's size, and the script errors it logs: a test asserts there are none.
export async function dashboardPage(browser) {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  return { page, errors };
}
