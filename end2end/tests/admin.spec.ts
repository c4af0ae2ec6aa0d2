import { expect, test, type Page } from "@playwright/test";
import { dollars, failOnCspViolations, hydrated, signIn, signUp, snap } from "./support";

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

/** Polls the renter's rental until `done` holds of it (the demo agent runs it for real). */
async function rentalUntil(page: import("@playwright/test").Page, id: number, done: (r: any) => boolean) {
  let rental: any;
  await expect
    .poll(async () => {
      rental = await (await page.request.get(`/api/v1/rentals/${id}`)).json();
      return done(rental.rental);
    }, { timeout: 30_000 })
    .toBe(true);
  return rental.rental;
}

/** The admin table's row of rental `id`, by its link's exact text: a row's text runs its cells
 * together ("#1" then "1× H100" reads "#11× H100"), so matching text found rental 11 twice once
 * a rental #1 of one GPU was in the table. */
function rentalRow(page: Page, id: number) {
  return page.getByTestId("admin-rental-row").filter({ has: page.getByRole("link", { name: `#${id}`, exact: true }) });
}

test("an admin finds a rental, refunds it through the ledger, and reads revenue and occupancy", async ({ page, browser }, testInfo) => {
  const origin = new URL(String(testInfo.project.use.baseURL)).origin;
  // The demo renter runs a short job on the Frankfurt H100s through the API, and stops it.
  const theirs = await browser.newContext();
  const renter = await theirs.newPage();
  await signIn(renter, "renter@demo.cardpool.dev");
  const offers = await (await renter.request.get("/api/v1/offers?per_page=50")).json();
  const offer = offers.offers.find((o: any) => o.location?.includes("Frankfurt") && o.gpu_model.includes("H100"));
  expect(offer, "the demo's Frankfurt H100 offer").toBeTruthy();
  const booked = await renter.request.post("/api/v1/rentals", {
    headers: { origin },
    data: { host_id: offer.host_id, gpu_model: offer.gpu_model, gpu_count: 1, kind: "on_demand", workload: { command: "sleep 600" } },
  });
  expect(booked.status(), await booked.text()).toBe(201);
  const id: number = (await booked.json()).id;
  try {
    await rentalUntil(renter, id, (r) => r.state === "running");
    await renter.waitForTimeout(3_000);
  } finally {
    await renter.request.post(`/api/v1/rentals/${id}/stop`, { headers: { origin } });
  }
  const ended = await rentalUntil(renter, id, (r) => r.state === "ended" && r.charged_micros > 0);
  await theirs.close();

  // The admin finds it by renter and state, and refunds all of it.
  await signIn(page, "admin@demo.cardpool.dev");
  await page.goto("/admin/rentals");
  await hydrated(page);
  await page.getByLabel("Renter email").fill("renter@demo");
  await page.getByLabel("State", { exact: true }).selectOption("ended");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page).toHaveURL(/renter=renter%40demo|renter=renter@demo/);
  await expect(page).toHaveURL(/state=ended/);
  await hydrated(page);
  const row = rentalRow(page, id);
  await expect(row).toBeVisible();
  const charged = await row.getByTestId("rental-charged").innerText();
  expect(charged).toBe(dollars(ended.charged_micros));
  await row.locator("summary").click();
  await row.getByLabel(/^Amount/).fill(charged.replace("$", ""));
  await row.getByLabel(/^Reason/).fill("the job hit a driver fault");
  await row.getByRole("button", { name: "Refund" }).click();
  await expect(page.getByRole("status").filter({ hasText: "Refunded rental" })).toHaveText(
    `Refunded rental #${id}: ${charged} refunded in all, $0.00 left.`,
  );
  await expect(row.locator("summary")).toHaveCount(0);
  await snap(page, "admin-rentals");

  // Refused beyond what is left: nothing was left.
  const again = await page.request.post(`/api/v1/admin/rentals/${id}/refund`, {
    headers: { origin },
    data: { amount: "0.01", reason: "once more" },
  });
  expect(again.status()).toBe(422);
  expect(await again.text()).toContain("$0.00");

  // The audit log and the renter's record.
  await page.goto("/admin/audit?subject_kind=rental");
  await expect(page.getByTestId("audit-row").first()).toContainText("rental.refund");
  await expect(page.getByTestId("audit-row").first()).toContainText("the job hit a driver fault");
  await page.goto("/admin/users?q=renter%40demo.cardpool.dev");
  await page.getByRole("link", { name: "renter@demo.cardpool.dev" }).click();
  await expect(page.getByTestId("account-email")).toHaveText("renter@demo.cardpool.dev");
  await expect(page.getByTestId("account-wallet")).toContainText("$");
  await expect(rentalRow(page, id)).toBeVisible();
  await snap(page, "admin-account");

  // The host's history: its status changes and its rentals.
  await page.goto(`/admin/hosts/${offer.host_id}`);
  await expect(page.getByTestId("host-name")).toHaveText("fra-h100-01");
  await expect(page.getByTestId("host-event-row").first()).toBeVisible();
  await expect(rentalRow(page, id)).toBeVisible();
  await snap(page, "admin-host-history");

  // Revenue and occupancy: 30 days, then 12 weeks.
  await page.goto("/admin/reports");
  await expect(page.getByTestId("revenue-chart").locator("svg")).toHaveAttribute("data-bars", "30");
  await expect(page.getByTestId("occupancy-chart").locator("svg")).toHaveAttribute("data-bars", "30");
  await expect(page.getByTestId("report-refunds")).toBeVisible();
  // Today's bucket holds this refund (and any other of today's, e.g. the other browser's run).
  const today = await (await page.request.get("/api/v1/admin/reports?period=day&buckets=1")).json();
  expect(today.buckets[0].refunds_micros).toBeGreaterThanOrEqual(ended.charged_micros);
  expect(today.buckets[0].gross_micros).toBeGreaterThanOrEqual(ended.charged_micros);
  await snap(page, "admin-reports");
  await hydrated(page);
  await page.getByRole("link", { name: "Weeks" }).click();
  await expect(page).toHaveURL(/period=week/);
  await expect(page.getByTestId("revenue-chart").locator("svg")).toHaveAttribute("data-bars", "12");
});
