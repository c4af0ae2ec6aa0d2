import { expect, test, type Page } from "@playwright/test";

// Shared by every spec: screenshots per backend and project, waiting for hydration, and the
// rule that our pages raise no Content-Security-Policy violation or page error.
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
