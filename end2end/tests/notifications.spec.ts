import { expect, test } from "@playwright/test";
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { endRentalsAfterFailure, failOnCspViolations, hydrated, signIn, signUp, snap } from "./support";

// What Cardpool tells people, as they use it: spend limits on the wallet (a bad one refused,
// a good one shown with what it leaves), a webhook that receives a signed test event on a
// receiver this test runs (the signature checked here, as a customer's server would), and the
// bell that counts a rental's news until it is read. The demo server allows local webhooks.
failOnCspViolations();
endRentalsAfterFailure();

/** A webhook receiver on a free local port: every request's headers and raw body. */
async function receiver() {
  const got: { headers: IncomingMessage["headers"]; body: string }[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      got.push({ headers: req.headers, body });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}/cardpool`, got, close: () => server.close() };
}

/** What a receiver does: `t=<unix>,v1=<hex HMAC-SHA256(secret, "t.body")>`, at most 5 min old. */
function verified(secret: string, header: string, body: string) {
  const parts = Object.fromEntries(header.split(",").map((p) => p.split("=", 2)));
  const expected = createHmac("sha256", secret).update(`${parts.t}.${body}`).digest();
  const given = Buffer.from(parts.v1 ?? "", "hex");
  const fresh = Math.abs(Date.now() / 1000 - Number(parts.t)) <= 300;
  return fresh && given.length === expected.length && timingSafeEqual(given, expected);
}

test("spend limits are set on the wallet and a webhook receives a signed test event", async ({ page }) => {
  await signUp(page, `limits-${Date.now()}-${Math.random().toString(36).slice(2, 7)}@example.com`);
  await page.goto("/wallet");
  await hydrated(page);
  await expect(page.getByTestId("spend-today")).toContainText("$0.00 (no limit)");
  await page.getByLabel("Daily limit ($)").fill("lots");
  await page.getByRole("button", { name: "Save limits" }).click();
  await expect(page.getByText("is not an amount in dollars")).toBeVisible();
  await page.getByLabel("Daily limit ($)").fill("25");
  await page.getByLabel("Monthly limit ($)").fill("300");
  await page.getByRole("button", { name: "Save limits" }).click();
  await expect(page.getByTestId("limits-saved")).toBeVisible();
  await expect(page.getByTestId("spend-today")).toContainText("$0.00 of $25.00");
  await expect(page.getByTestId("spend-month")).toContainText("$0.00 of $300.00");
  await snap(page, "wallet-limits");

  const hook = await receiver();
  try {
    await page.goto("/account/webhooks");
    await hydrated(page);
    await page.getByLabel("URL").fill("ftp://example.com/x");
    await page.getByRole("button", { name: "Add webhook" }).click();
    await expect(page.getByText("an https:// URL")).toBeVisible();
    await page.getByLabel("URL").fill(hook.url);
    await page.getByRole("button", { name: "Add webhook" }).click();
    const secret = (await page.getByTestId("webhook-secret").innerText()).trim();
    expect(secret).toMatch(/^whsec_/);
    const row = page.getByTestId("webhook").filter({ hasText: hook.url });
    await expect(row).toContainText("No deliveries yet.");
    await row.getByTestId("send-test").click();
    // Sent within seconds by the delivery worker; the log follows it.
    await expect(row.getByTestId("delivery").first()).toHaveAttribute("data-state", "delivered", { timeout: 15_000 });
    await expect(row.getByTestId("delivery").first()).toContainText("HTTP 204");
    await snap(page, "webhooks");
    expect(hook.got).toHaveLength(1);
    const { headers, body } = hook.got[0];
    expect(headers["cardpool-event"]).toBe("test");
    expect(verified(secret, String(headers["cardpool-signature"]), body)).toBe(true);
    expect(verified("whsec_someone-else", String(headers["cardpool-signature"]), body)).toBe(false);
    expect(JSON.parse(body)).toMatchObject({ type: "test", data: { webhook_id: expect.any(Number) } });
  } finally {
    hook.close();
  }
});

test("the advisor plans a job, the bell counts a rental's news until it is read, and a rental carries its caps", async ({ page }) => {
  test.setTimeout(90_000);
  await signIn(page, "renter@demo.cardpool.dev");
  await page.goto("/offers?location=PL&kind=on_demand");
  await page.getByTestId("offer-rent").first().click();
  await hydrated(page);
  // The advisor first: a checkpointed 10-hour job with a day to finish.
  await page.getByLabel("Job length (hours)").fill("10");
  await page.getByLabel("Done within (hours)").fill("4");
  await page.getByRole("button", { name: "Advise" }).click();
  await expect(page.getByText("at least the job's hours")).toBeVisible();
  await page.getByLabel("Done within (hours)").fill("24");
  await page.getByRole("button", { name: "Advise" }).click();
  await expect(page.getByTestId("advice")).toContainText("You save");
  await expect(page.getByTestId("advice-parts")).toContainText("Spot");
  await snap(page, "advisor");
  await page.getByLabel("Number of GPUs").fill("1");
  await page.getByLabel("Command").fill("sleep 600");
  await page.getByLabel("Stop at a cost of ($)").fill("0");
  await page.getByRole("button", { name: "Book" }).click();
  await expect(page.getByText("a cap above $0")).toBeVisible();
  await page.getByLabel("Stop at a cost of ($)").fill("5");
  await page.getByLabel("Stop after (hours)").fill("1.5");
  await page.getByRole("button", { name: "Book" }).click();
  await expect(page).toHaveURL(/\/rentals\/\d+$/);
  const id = page.url().split("/").pop();
  await expect(page.getByTestId("rental-state")).toHaveText("Running", { timeout: 30_000 });
  await expect(page.locator("#field-max_cost-cap")).toHaveValue("5.00");
  await expect(page.locator("#field-max_hours-cap")).toHaveValue("1.5");

  // A full load reads the count: the rental's start is news.
  await page.reload();
  await expect(page.getByTestId("bell-count")).toBeVisible();
  await page.getByTestId("bell").click();
  await expect(page).toHaveURL(/\/notifications$/);
  await hydrated(page);
  const news = page.getByTestId("notification").filter({ hasText: `Rental #${id} is running` });
  await expect(news).toHaveAttribute("data-read", "false");
  await snap(page, "notifications");
  await page.getByTestId("mark-read").click();
  await expect(page.getByTestId("unread")).toHaveText("0 unread");
  await expect(page.getByTestId("bell-count")).toHaveCount(0);
  await expect(news).toHaveAttribute("data-read", "true");

  await page.goto(`/rentals/${id}`);
  await hydrated(page);
  await page.getByRole("button", { name: "Stop rental" }).click();
  await expect(page.getByTestId("rental-state")).toHaveText("Ended", { timeout: 30_000 });
});
