import { defineConfig, devices } from "@playwright/test";

// The server is started by scripts/test.sh (it waits for /healthz), which passes its URL here.
const baseURL = process.env.CARDPOOL_E2E_URL ?? "http://127.0.0.1:3000";

// Debian's Chromium: Playwright must never download a browser (the network is closed), and
// the background-networking flags stop Chromium from dialling Google at every start.
const chromium = {
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
};

export default defineConfig({
  testDir: "./tests",
  timeout: 60_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  outputDir: "test-results",
  use: {
    baseURL,
    trace: "retain-on-failure",
    screenshot: "only-on-failure",
  },
  projects: [
    {
      name: "desktop",
      use: { ...devices["Desktop Chrome"], launchOptions: chromium },
    },
    {
      name: "mobile",
      use: { ...devices["Pixel 7"], launchOptions: chromium },
    },
  ],
});
