import { expect, test, type Page } from "@playwright/test";

// Shared by every spec: screenshots per backend and project, waiting for hydration, signing
// up and in, and the rule that our pages raise no Content-Security-Policy violation or page
// error.
export const backend = process.env.CARDPOOL_E2E_BACKEND ?? "sqlite";

export async function snap(page: Page, name: string) {
  await page.screenshot({ path: `screenshots/${backend}/${test.info().project.name}/${name}.png`, fullPage: true });
}

/** Waits until the page is hydrated, so clicks go through the app rather than plain forms. */
export async function hydrated(page: Page) {
  await page.locator("body[data-hydrated]").waitFor({ state: "attached" });
}

/** Fails the calling spec's tests on any CSP violation or uncaught page error. */
export function failOnCspViolations() {
  test.beforeEach(async ({ page }) => {
    const violations: string[] = [];
    page.on("console", (msg) => {
      if (msg.text().includes("Content Security Policy")) violations.push(msg.text());
    });
    page.on("pageerror", (err) => violations.push(`page error: ${err.message}`));
    (page as any).__violations = violations;
  });
  test.afterEach(async ({ page }) => {
    expect((page as any).__violations).toEqual([]);
  });
}

/** "$1.234567" → 1234567 micro-dollars, exactly. */
export function micros(text: string): bigint {
  const [whole, fraction = ""] = text.replace("$", "").trim().split(".");
  return BigInt(whole) * 1_000_000n + BigInt(fraction.padEnd(6, "0"));
}

/** Micro-dollars as the app shows them: at least two decimals, `$0.001245`. */
export function dollars(amount: bigint | number): string {
  const value = BigInt(amount);
  let fraction = String(value % 1_000_000n).padStart(6, "0");
  while (fraction.length > 2 && fraction.endsWith("0")) fraction = fraction.slice(0, -1);
  return `$${value / 1_000_000n}.${fraction}`;
}

/** The demo accounts' password (see README). */
export const DEMO_PASSWORD = "cardpool-demo";

/** Signs in through the form and waits for the account page. */
export async function signIn(page: Page, email: string, password = DEMO_PASSWORD) {
  await page.goto("/sign-in");
  await hydrated(page);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/account$/);
}

/** Creates an account through the form and waits for the account page. */
export async function signUp(page: Page, email: string, password = "correct horse battery") {
  await page.goto("/sign-up");
  await hydrated(page);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Create account" }).click();
  await expect(page).toHaveURL(/\/account$/);
}

/** In a spec whose tests rent GPUs: after a test that failed, ends every rental of the signed-in
 * account still holding GPUs, so one failure stays one failure. Otherwise a rental left running
 * (a reservation holds its GPU for an hour) empties the demo offer for every test after it, and
 * each of those waits out its whole timeout on an offer that never shows. Passing tests end
 * their own rentals; this does not do it for them. */
export function endRentalsAfterFailure() {
  test.afterEach(async ({ page }, testInfo) => {
    if (testInfo.status === testInfo.expectedStatus) return;
    const origin = new URL(String(testInfo.project.use.baseURL)).origin;
    const list = await page.request.get("/api/v1/rentals");
    if (!list.ok()) return;
    for (const rental of await list.json()) {
      if (["requested", "provisioning", "running"].includes(rental.state)) {
        // Where it stood, for the failure's reader: its timeline and host.
        const detail = await page.request.get(`/api/v1/rentals/${rental.id}`);
        if (detail.ok()) {
          const { events } = await detail.json();
          const timeline = events.map((e: any) => `${e.at} ${e.state}: ${e.reason}`).join("\n  ");
          console.log(`after the failure: rental ${rental.id} on host ${rental.host_id} (${rental.state}):\n  ${timeline}`);
        }
        const stop = await page.request.post(`/api/v1/rentals/${rental.id}/stop`, { headers: { origin } });
        console.log(`after the failure: rental ${rental.id} (${rental.state}) stopped: HTTP ${stop.status()}`);
      }
    }
  });
}
