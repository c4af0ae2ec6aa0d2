// Benchmark (not a test): the code a first visitor's browser downloads before a page is
// interactive. Opens each page in Debian's Chromium with an empty cache, waits until it has
// hydrated, and lists every JavaScript and wasm file it fetched (the shell, the page's own
// lazily loaded chunks and the chunk loader), each with its size as sent to a browser that
// accepts brotli. Printed by scripts/bench.sh; the goal is <= 250 KB brotli per page.
//
//   node end2end/bench/first-load.mjs http://127.0.0.1:3000 / /offers
import { chromium } from "@playwright/test";

const [base, ...paths] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
for (const path of paths) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const code = new Set();
  page.on("request", (req) => {
    const url = new URL(req.url());
    if (/\.(wasm|js)$/.test(url.pathname)) code.add(url.pathname);
  });
  await page.goto(base + path);
  await page.waitForSelector("body[data-hydrated=true]", { timeout: 30_000 });
  await page.waitForLoadState("networkidle");
  let total = 0;
  console.log(`${path}: code fetched before the page was interactive`);
  for (const file of [...code].sort()) {
    // Chromium asks for brotli only over HTTPS, so the size is taken as a brotli-accepting
    // browser gets it, from the server directly.
    const res = await fetch(base + file, { headers: { "accept-encoding": "br" } });
    const sent = res.headers.get("content-encoding") ?? "identity";
    const bytes = Number(res.headers.get("content-length") ?? (await res.arrayBuffer()).byteLength);
    total += bytes;
    console.log(`  ${file.padEnd(64)} ${String(bytes).padStart(9)} bytes ${sent}`);
  }
  const ok = total <= 256_000;
  console.log(`  ${"total".padEnd(64)} ${String(total).padStart(9)} bytes (goal: <= 250 KB = 256000) ${ok ? "met" : "NOT met"}`);
  await context.close();
}
await browser.close();
