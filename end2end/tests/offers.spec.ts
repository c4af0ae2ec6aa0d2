import { expect, test } from "@playwright/test";
import { failOnCspViolations, snap } from "./support";

// A visitor browses the demo market: the simulated hosts are live, listed offers; filters live
// in the URL, so a search can be shared.
failOnCspViolations();

test("a visitor finds GPUs by filters that live in the URL", async ({ page }) => {
  await page.goto("/");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Find GPUs" }).click();
  await expect(page.getByRole("heading", { name: "Find GPUs" })).toBeVisible();
  // The demo's six simulated hosts report, get priced and listed within seconds of start:
  // five sell whole GPUs, the Amsterdam one its H100s' MIG slices (three profiles).
  await expect(page.getByTestId("offer")).toHaveCount(8, { timeout: 30_000 });
  await expect(page.getByTestId("offer-count")).toContainText("8 offers");
  await snap(page, "offers");

  await page.getByLabel("Location").fill("DE");
  await page.getByLabel("Sort by").selectOption("availability");
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page).toHaveURL(/location=DE/);
  await expect(page).toHaveURL(/sort=availability/);
  const offers = page.getByTestId("offer");
  await expect(offers).toHaveCount(3);
  // Most free GPUs first: the two 8× H100 hosts before the 4× L40S one.
  await expect(offers.first().getByTestId("offer-free")).toHaveText("8 free");
  await expect(offers.nth(1).getByTestId("offer-free")).toHaveText("8 free");
  await expect(offers.nth(2).getByTestId("offer-free")).toHaveText("4 free");

  // The same URL, opened fresh, shows the same search.
  await page.goto(page.url());
  await expect(page.getByTestId("offer")).toHaveCount(3);
  await expect(page.getByLabel("Location")).toHaveValue("DE");

  // A malformed filter is explained, not ignored.
  await page.goto("/offers?max_price=cheap");
  await expect(page.getByRole("alert")).toContainText("max price");
  await snap(page, "offers-bad-filter");
});
