import { expect, test, type Locator } from "@playwright/test";
import { endRentalsAfterFailure, failOnCspViolations, hydrated, signIn, snap } from "./support";

// Live telemetry against the demo server's simulated agents (one sample a second): a chart on
// a rental's page and the admin's fleet chart and heat map change while the page stays open,
// with no reload. The rental is ended again, so the market is as it was.
failOnCspViolations();
endRentalsAfterFailure();

/** The number of points a live chart draws. */
async function points(chart: Locator): Promise<number> {
  return Number(await chart.locator("svg").getAttribute("data-points"));
}

test("a rental's GPU charts update live while it runs", async ({ page }) => {
  test.setTimeout(120_000);
  await signIn(page, "renter@demo.cardpool.dev");
  await page.goto("/offers?location=PL&kind=on_demand");
  await page.getByTestId("offer-rent").first().click();
  await hydrated(page);
  await page.getByLabel("Number of GPUs").fill("1");
  await page.getByLabel("Command").fill("sleep 3600");
  await page.getByRole("button", { name: "Book" }).click();
  await expect(page).toHaveURL(/\/rentals\/\d+$/);
  await expect(page.getByTestId("rental-state")).toHaveText("Running", { timeout: 30_000 });

  // The feed connects and the utilisation chart gains points without a reload.
  await expect(page.getByTestId("live-badge")).toHaveText("Live", { timeout: 20_000 });
  const chart = page.locator('[data-testid^="chart-utilisation-"]').first();
  await expect(chart).toBeVisible();
  const first = await points(chart);
  const path = await chart.locator("path").getAttribute("d");
  await expect.poll(() => points(chart), { timeout: 15_000 }).toBeGreaterThan(first + 2);
  expect(await chart.locator("path").getAttribute("d")).not.toBe(path);
  // A rented simulated GPU is busy; only the rental's one GPU is shown.
  await expect(page.locator('[data-testid^="gpu-panel-"]')).toHaveCount(1);
  await expect(chart.getByTestId("chart-latest")).toHaveText(/^\d+ %$/);
  await expect(page.getByTestId("rental-energy")).toContainText("Wh");
  await snap(page, "rental-telemetry");

  await page.getByRole("button", { name: "Stop rental" }).click();
  await expect(page.getByTestId("rental-state")).toHaveText("Ended", { timeout: 30_000 });
  await expect(page.getByTestId("live-badge")).toHaveText("Not live", { timeout: 20_000 });
});

test("the admin fleet dashboard updates live and lists alerts", async ({ page }) => {
  test.setTimeout(90_000);
  await signIn(page, "admin@demo.cardpool.dev");
  await page.goto("/admin/fleet");
  await hydrated(page);
  await expect(page.getByRole("heading", { name: "Fleet", exact: true })).toBeVisible();
  await expect(page.getByTestId("fleet-online")).toContainText("/");
  await expect(page.getByTestId("live-badge")).toHaveText("Live", { timeout: 20_000 });
  const chart = page.getByTestId("fleet-chart");
  const first = await points(chart);
  await expect.poll(() => points(chart), { timeout: 15_000 }).toBeGreaterThan(first + 2);
  // Every demo GPU has a heat-map cell with a live reading.
  const cell = page.locator('[data-testid^="heat-"]').first();
  await expect(cell).toContainText("%");
  expect(await page.locator('[data-testid^="heat-"]').count()).toBeGreaterThanOrEqual(18);
  await expect(page.getByRole("heading", { name: "Alerts" })).toBeVisible();
  await snap(page, "admin-fleet");

  // Renters cannot open it.
  await page.context().clearCookies();
  await signIn(page, "renter@demo.cardpool.dev");
  await page.goto("/admin/fleet");
  await expect(page.getByText("Admins only")).toBeVisible();
});
