import { expect, test } from "@playwright/test";
import { dollars, failOnCspViolations, hydrated, micros, signIn, signUp, snap } from "./support";

// Money in the browser against the demo server and its local test-mode Stripe: a renter tops
// up through the test checkout page; a demo provider onboards to Connect and is paid out; an
// admin credits a wallet with a reason.
failOnCspViolations();

test("a renter tops up through the test checkout and sees the exact balance", async ({ page }, info) => {
  const email = `wallet-${info.project.name}-${Date.now()}@example.com`;
  await signUp(page, email);

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Wallet" }).click();
  await expect(page.getByRole("heading", { name: "Wallet", exact: true })).toBeVisible();
  await expect(page.getByTestId("wallet-balance")).toHaveText("$0.00");
  await hydrated(page);

  // A bad amount is refused on the field, before anything reaches Stripe.
  await page.getByLabel("Amount (USD)").fill("4.99");
  await page.getByRole("button", { name: "Continue to payment" }).click();
  await expect(page.locator("#field-amount-error")).toContainText("top up between $5.00 and $10000.00");

  await page.getByLabel("Amount (USD)").fill("25.50");
  await page.getByRole("button", { name: "Continue to payment" }).click();
  // Stripe's (test-mode) checkout page.
  await expect(page.getByRole("note")).toContainText("TEST MODE");
  await expect(page.getByTestId("amount")).toHaveText("$25.50");
  await snap(page, "stripe-test-checkout");
  await page.getByRole("button", { name: "Pay $25.50" }).click();

  await expect(page).toHaveURL(/\/wallet\?top_up=\d+/);
  await expect(page.getByTestId("top-up-status")).toHaveAttribute("data-status", "credited");
  await expect(page.getByTestId("top-up-status")).toContainText("$25.50 was added");
  await expect(page.getByTestId("wallet-balance")).toHaveText("$25.50");
  const row = page.getByTestId("ledger-row");
  await expect(row).toHaveCount(1);
  await expect(row).toContainText("Wallet top-up via Stripe Checkout");
  await expect(row).toContainText("+$25.50");
  await snap(page, "wallet-after-top-up");

  await row.getByRole("link", { name: "Receipt" }).click();
  await expect(page.getByRole("heading", { name: "Receipt" })).toBeVisible();
  await expect(page.getByTestId("receipt-amount")).toHaveText("$25.50 USD");
  await snap(page, "receipt");

  const csv = await page.request.get("/api/v1/wallet/transactions.csv");
  expect(csv.status()).toBe(200);
  expect(await csv.text()).toContain(',top_up,"Wallet top-up via Stripe Checkout",25.50,25.50');
});

test("a provider sets up Stripe payouts and pays out available earnings", async ({ page }, info) => {
  // Each project uses its own demo provider, both seeded with earnings from past rentals.
  const provider = info.project.name === "desktop" ? "provider@demo.cardpool.dev" : "provider2@demo.cardpool.dev";
  await signIn(page, provider);
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Earnings" }).click();
  await expect(page.getByRole("heading", { name: "Earnings", exact: true })).toBeVisible();
  const available = (await page.getByTestId("earnings-available").textContent())!.trim();
  expect(available).not.toBe("$0.00");
  await expect(page.getByTestId("connect-status")).toHaveText("not set up");
  await expect(page.getByTestId("ledger-row").first()).toBeVisible();
  await hydrated(page);
  await snap(page, "earnings-before");

  await page.getByRole("button", { name: "Set up payouts with Stripe" }).click();
  await expect(page.getByRole("note")).toContainText("TEST MODE");
  await expect(page.getByRole("heading", { name: "Set up payouts for Cardpool" })).toBeVisible();
  await page.getByRole("button", { name: "Complete test onboarding" }).click();

  await expect(page).toHaveURL(/\/provider\/earnings\?onboarding=return/);
  await expect(page.getByTestId("connect-status")).toHaveText("payouts enabled");
  await hydrated(page);
  // A payout is whole cents; what is under a cent stays (an admin's refund on one of the
  // provider's rentals takes its share from available earnings while the charge is pending).
  const cents = micros(available) - (micros(available) % 10_000n);
  const left = dollars(micros(available) % 10_000n);
  await page.getByRole("button", { name: "Request payout" }).click();
  await expect(page.getByText(`${dollars(cents)} is on its way to your Stripe account.`)).toBeVisible();
  await expect(page.getByTestId("earnings-available")).toHaveText(left);
  await expect(page.getByTestId("earnings-paid-out")).toHaveText(dollars(cents));
  await expect(page.getByTestId("payout-row")).toHaveCount(1);
  await expect(page.getByTestId("payout-row")).toContainText("paid");
  await snap(page, "earnings-after-payout");

  // Nothing left: a second payout is refused with the reason.
  await page.getByRole("button", { name: "Request payout" }).click();
  await expect(page.getByRole("alert").filter({ hasText: "nothing to pay out yet" })).toBeVisible();
});

test("an admin credits a wallet with a reason and sees it in the audit trail", async ({ page }, info) => {
  const reason = `E2E goodwill ${info.project.name} ${Date.now()}`;
  await signIn(page, "admin@demo.cardpool.dev");
  await page.goto("/admin/credits");
  await expect(page.getByRole("heading", { name: "Credits & refunds" })).toBeVisible();
  await hydrated(page);
  await page.getByRole("button", { name: "Apply adjustment" }).click();
  await expect(page.locator("#field-reason-error")).toContainText("say why");

  await page.getByLabel("Account email").fill("renter@demo.cardpool.dev");
  await page.getByLabel("Amount (USD)").fill("12.34");
  await page.getByLabel("Kind").selectOption("credit");
  await page.getByLabel("Reason (required, kept for audit)").fill(reason);
  await page.getByRole("button", { name: "Apply adjustment" }).click();
  await expect(page.getByText("Credited $12.34 to renter@demo.cardpool.dev.")).toBeVisible();
  const row = page.getByTestId("adjustment-row").filter({ hasText: reason });
  await expect(row).toHaveCount(1);
  await expect(row).toContainText("admin@demo.cardpool.dev");
  await snap(page, "admin-credits");
});
