import { expect, test } from "@playwright/test";
import { failOnCspViolations, hydrated, signIn, signUp, snap } from "./support";

// The admin console as the demo admin uses it: verify a host (renters see the badge and can
// filter on it), delist it for maintenance and relist it, suspend an account (it is signed out
// at once) and reinstate it; every action is in the audit log with its reason.
failOnCspViolations();

async function apply(row: import("@playwright/test").Locator, action: string, reason: string) {
  await row.getByText("Manage").click();
  await row.getByLabel("Action").selectOption(action);
  await row.getByLabel(/^Reason/).fill(reason);
  await row.getByRole("button", { name: "Apply" }).click();
}

test("an admin verifies, delists and suspends, and the audit log says who did what and why", async ({ page, browser }) => {
  // A renter who will be suspended, signed in in a browser of their own.
  const suspect = `suspect-${Date.now()}@example.com`;
  const theirs = await browser.newContext();
  const theirPage = await theirs.newPage();
  await signUp(theirPage, suspect);

  await signIn(page, "admin@demo.cardpool.dev");
  await page.goto("/admin/hosts");
  await hydrated(page);
  const host = page.getByTestId("admin-host-row").filter({ hasText: "pdx-a100-01" });
  await expect(host).toBeVisible();
  // Verified by an earlier run against this server (the other browser project): start over.
  if (await host.getByTestId("verified").count()) {
    await apply(host, "unverify", "checking the badge again");
    await expect(host.getByTestId("verified")).toHaveCount(0);
    await page.reload();
    await hydrated(page);
  }
  await apply(host, "verify", "passed the 24 h burn-in");
  await expect(page.getByRole("status")).toContainText("pdx-a100-01 is verified");
  await expect(host.getByTestId("verified")).toBeVisible();

  // Renters see the badge, and the filter keeps only verified hosts.
  await page.goto("/offers?verified=true");
  await expect(page.getByTestId("offer")).toHaveCount(1, { timeout: 15_000 });
  await expect(page.getByTestId("offer-verified")).toBeVisible();
  await expect(page.getByLabel("Verified hosts only")).toBeChecked();
  await snap(page, "offers-verified");

  // Delisted for maintenance: gone from the market until relisted.
  await page.goto("/admin/hosts");
  await hydrated(page);
  await apply(host, "delist", "maintenance: swapping a PSU");
  await expect(host.getByTestId("delisted")).toBeVisible();
  await expect(host).toContainText("maintenance: swapping a PSU");
  await snap(page, "admin-hosts");
  await page.goto("/offers?verified=true");
  await expect(page.getByText("No offers match these filters right now.")).toBeVisible();
  await page.goto("/admin/hosts");
  await hydrated(page);
  await apply(host, "relist", "PSU swapped");
  await expect(host.getByTestId("delisted")).toHaveCount(0);

  // Suspended: signed out at their next request; reinstated.
  await page.goto(`/admin/users?q=${encodeURIComponent(suspect)}`);
  await hydrated(page);
  const user = page.getByTestId("user-row").filter({ hasText: suspect });
  await expect(page.getByTestId("user-row")).toHaveCount(1);
  await apply(user, "suspend", "card testing from this account");
  await expect(user.getByTestId("suspended")).toBeVisible();
  const me = await theirPage.request.get("/api/v1/me");
  expect(me.status()).toBe(401);
  // A fresh page: the row's menu that was just used is still open.
  await page.reload();
  await hydrated(page);
  await apply(user, "reinstate", "the card holder confirmed");
  await expect(user.getByTestId("suspended")).toHaveCount(0);
  await theirs.close();

  // The audit log: newest first, each line with its admin and reason.
  await page.goto("/admin/audit");
  const rows = page.getByTestId("audit-row");
  await expect(rows.first()).toContainText("user.reinstate");
  await expect(rows.first()).toContainText("the card holder confirmed");
  await expect(rows.first()).toContainText("admin@demo.cardpool.dev");
  await expect(rows.nth(1)).toContainText("user.suspend");
  await expect(rows.nth(2)).toContainText("host.relist");
  await expect(rows.nth(3)).toContainText("host.delist");
  await expect(rows.nth(4)).toContainText("host.verify");
  await snap(page, "admin-audit");
  await page.getByLabel("Action").selectOption("host.delist");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page).toHaveURL(/action=host.delist/);
  // Only delistings (this server may have more than this run's, from the other browser project).
  await expect(rows.first()).toContainText("maintenance: swapping a PSU");
  for (const row of await rows.all()) await expect(row).toContainText("host.delist");
});
