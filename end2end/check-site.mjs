// The release site's smoke check (`scripts/run.sh --check`): each page given loads in
// Debian's Chromium without a script error and hydrates (the wasm bundle sets
// `data-hydrated` on <body>), and the bundle arrives compressed with long-lived caching.
//
//   node end2end/check-site.mjs http://127.0.0.1:3000 / /offers
import { chromium } from "@playwright/test";

const [base, ...paths] = process.argv.slice(2);
if (!base || paths.length === 0) {
  console.error("usage: node check-site.mjs BASE_URL PATH...");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const failures = [];
try {
  for (const path of paths) {
    const page = await browser.newPage();
    const errors = [];
    const bundle = [];
    page.on("pageerror", (err) => errors.push(`uncaught: ${err.message}`));
    page.on("console", (msg) => msg.type() === "error" && errors.push(`console: ${msg.text()}`));
    page.on("response", (res) => {
      if (/\/pkg\/.*\.(wasm|js|css)$/.test(new URL(res.url()).pathname)) bundle.push(res);
    });
    const started = Date.now();
    const response = await page.goto(base + path);
    if (!response || response.status() !== 200) {
      failures.push(`${path}: HTTP ${response?.status()}`);
    }
    try {
      await page.waitForSelector('body[data-hydrated="true"]', { timeout: 30_000 });
    } catch {
      failures.push(`${path}: did not hydrate within 30 s`);
    }
    for (const res of bundle) {
      const name = new URL(res.url()).pathname;
      const headers = await res.allHeaders();
      if (!["br", "gzip"].includes(headers["content-encoding"])) {
        failures.push(`${path}: ${name} sent without compression`);
      }
      if (!(headers["cache-control"] ?? "").includes("immutable")) {
        failures.push(`${path}: ${name} not cached as immutable (${headers["cache-control"]})`);
      }
    }
    if (!bundle.some((res) => res.url().endsWith(".wasm"))) failures.push(`${path}: no wasm bundle loaded`);
    failures.push(...errors.map((e) => `${path}: ${e}`));
    console.log(`${path}: loaded and hydrated in ${Date.now() - started} ms (${bundle.length} bundle files)`);
    await page.close();
  }
} finally {
  await browser.close();
}
if (failures.length > 0) {
  console.error(failures.join("\n"));
  process.exit(1);
}
