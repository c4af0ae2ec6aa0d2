import { expect, test } from "@playwright/test";
import { failOnCspViolations, hydrated, snap } from "./support";

const password = "correct horse battery";

// The pages run under a strict, nonce-based Content-Security-Policy: any violation fails.
failOnCspViolations();

test("a visitor signs up, signs out, fails and succeeds to sign in, manages API tokens", async ({ page }, info) => {
  const email = `e2e-${info.project.name}-${Date.now()}@example.com`;

  await page.goto("/");
  await expect(page.getByRole("heading", { name: "Rent GPUs by the second. Earn from the ones you own." })).toBeVisible();
  await snap(page, "home");

  await page.goto("/no/such/page");
  await expect(page.getByRole("heading", { name: "Page not found" })).toBeVisible();
  await snap(page, "not-found");

  // Sign up: field-level errors first, tied to their inputs.
  await page.goto("/sign-up");
  await hydrated(page);
  await page.getByLabel("Email").fill("not-an-email");
  await page.getByLabel("Password").fill("short");
  await page.getByRole("button", { name: "Create account" }).click();
  await expect(page.locator("#field-email-error")).toHaveText("an email address needs an @");
  await expect(page.getByLabel("Email")).toHaveAttribute("aria-invalid", "true");
  await expect(page.locator("#field-password-error")).toContainText("at least 10 characters");
  await snap(page, "sign-up-errors");

  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Create account" }).click();
  await expect(page).toHaveURL(/\/account$/);
  await expect(page.getByTestId("account-email")).toHaveText(email);
  await snap(page, "account");

  // Sign out.
  await hydrated(page);
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/$/);
  await expect(page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Sign in" })).toBeVisible();

  // Wrong password: one generic message.
  await page.goto("/sign-in");
  await hydrated(page);
  await snap(page, "sign-in");
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill("not the password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert").filter({ hasText: "email or password is incorrect" })).toBeVisible();
  await snap(page, "sign-in-wrong-password");

  // Right password.
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/account$/);
  await expect(page.getByTestId("account-email")).toHaveText(email);

  // Create a token: the secret is shown once, then listed by prefix only.
  await page.goto("/account/tokens");
  await hydrated(page);
  await page.getByLabel("Token name").fill("e2e laptop");
  await page.getByRole("button", { name: "Create token" }).click();
  const secret = page.getByTestId("new-token-secret");
  await expect(secret).toContainText("cpt_");
  const secretText = (await secret.textContent())!.trim();
  const rows = page.getByTestId("token-row");
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toContainText("e2e laptop");
  await expect(rows.first()).not.toContainText(secretText);
  await snap(page, "api-tokens");

  // The token works against the JSON API...
  const me = await page.request.get("/api/v1/me", { headers: { Authorization: `Bearer ${secretText}` } });
  expect(me.status()).toBe(200);
  expect((await me.json()).email).toBe(email);

  // ...until it is revoked in the browser.
  await page.getByRole("button", { name: "Revoke token e2e laptop" }).click();
  await expect(rows).toHaveCount(0);
  await expect(page.getByText("No active tokens.")).toBeVisible();
  const after = await page.request.get("/api/v1/me", { headers: { Authorization: `Bearer ${secretText}` } });
  expect(after.status()).toBe(401);
});

test("the demo admin sees the user list", async ({ page }) => {
  await page.goto("/sign-in");
  await hydrated(page);
  await page.getByLabel("Email").fill("admin@demo.cardpool.dev");
  await page.getByLabel("Password").fill("cardpool-demo");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/account$/);
  await page.goto("/admin/users");
  await expect(page.getByRole("heading", { name: "Users" })).toBeVisible();
  await expect(page.getByRole("cell", { name: "renter@demo.cardpool.dev" })).toBeVisible();
  await snap(page, "admin-users");
});
