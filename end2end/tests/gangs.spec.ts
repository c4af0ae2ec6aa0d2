import { expect, test } from "@playwright/test";
import { endRentalsAfterFailure, failOnCspViolations, hydrated, signIn, snap } from "./support";

// A multi-node gang in the browser: the demo's two Frankfurt H100 hosts share the fabric
// fra-ib-1; the demo renter books 2 hosts × 8 GPUs on it from the market, watches both members
// come up and start together, reads a member's rendezvous environment in its log, and stops the
// whole gang. (The ranks really meeting over a fabric is the server's gang test: here the demo's
// hosts all live in one process.)
failOnCspViolations();
endRentalsAfterFailure();

/** Prints the rendezvous environment torchrun would read, then stays up. */
const RANKS = 'echo "rank=$NODE_RANK of $NNODES world=$WORLD_SIZE local=$LOCAL_WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT"; exec sleep 600';

test("a renter books a 2×8-GPU gang on one fabric, sees it start together, and stops it", async ({ page }) => {
  test.setTimeout(120_000);
  await signIn(page, "renter@demo.cardpool.dev");
  await page.goto("/offers?fabric=fra-ib-1");
  const offers = page.getByTestId("offer");
  await expect(offers).toHaveCount(2, { timeout: 30_000 });
  await expect(offers.first().getByTestId("fabric")).toContainText("fabric fra-ib-1");
  await offers.first().getByTestId("offer-gang").click();
  await expect(page.getByRole("heading", { name: "Rent a multi-node gang" })).toBeVisible();
  await hydrated(page);
  await expect(page.getByLabel("GPU model")).toHaveValue("NVIDIA H100 80GB HBM3");
  await expect(page.getByLabel("Fabric")).toHaveValue("fra-ib-1");

  // A gang of one host is explained, not booked.
  await page.getByLabel("Hosts").fill("1");
  await page.getByLabel("Command").fill(RANKS);
  await page.getByRole("button", { name: "Book gang" }).click();
  await expect(page.getByText("between 2 and 128 hosts")).toBeVisible();
  await snap(page, "gang-form-error");

  await page.getByLabel("Hosts").fill("2");
  await page.getByLabel("GPUs per host").fill("8");
  await page.getByRole("button", { name: "Book gang" }).click();
  await expect(page).toHaveURL(/\/gangs\/\d+$/);
  const members = page.getByTestId("gang-member");
  await expect(members).toHaveCount(2);
  // Both members up: the gang runs, billed from one instant.
  await expect(page.getByTestId("gang-state")).toHaveText("Running", { timeout: 30_000 });
  await expect(page.getByTestId("gang-rendezvous")).toHaveText("10.0.8.1:29500");
  await snap(page, "gang");

  // Rank 1's own page: it is a rental of its own, with its place in the gang and its log.
  await members.nth(1).getByRole("link").click();
  await expect(page.getByTestId("rental-gang")).toContainText("Rank 1 of gang");
  await expect(page.getByTestId("rental-logs")).toContainText(
    "rank=1 of 2 world=16 local=8 master=10.0.8.1:29500",
    { timeout: 15_000 },
  );
  await page.getByTestId("rental-gang").getByRole("link").click();
  await expect(page).toHaveURL(/\/gangs\/\d+$/);
  await hydrated(page);

  await page.getByRole("button", { name: "Stop the whole gang" }).click();
  await expect(page.getByTestId("gang-state")).toHaveText("Ended", { timeout: 30_000 });
  await expect(page.getByTestId("gang-cost")).toContainText("$");

  // The renter's rentals list the gang.
  await page.goto("/rentals");
  await expect(page.getByTestId("gang-row").first()).toContainText("2 hosts × 8 NVIDIA H100 80GB HBM3");
});

test("a spot gang is booked with one bid and preempted as a whole when demand takes one host", async ({ page }, testInfo) => {
  test.setTimeout(120_000);
  const origin = new URL(String(testInfo.project.use.baseURL)).origin;
  await signIn(page, "renter@demo.cardpool.dev");
  await page.goto("/gangs/new?model=NVIDIA%20H100%2080GB%20HBM3&fabric=fra-ib-1");
  await hydrated(page);
  await page.getByLabel("Gang kind").selectOption("spot");
  // Spot stops as a whole: no choice to keep the others.
  await expect(page.getByText("If a member is lost")).toBeHidden();
  await page.getByLabel("GPUs per host").fill("8");
  await page.getByLabel("Command").fill(RANKS);
  // A spot gang needs a bid.
  await page.getByRole("button", { name: "Book gang" }).click();
  await expect(page.getByText("your bid per GPU-hour")).toBeVisible();
  await page.getByLabel("Your bid").fill("2.00");
  await page.getByRole("button", { name: "Book gang" }).click();
  await expect(page).toHaveURL(/\/gangs\/\d+$/);
  await expect(page.getByTestId("gang-state")).toHaveText("Running", { timeout: 30_000 });
  await expect(page.getByText("preempted as a whole")).toBeVisible();
  const gangId = Number(page.url().split("/").pop());

  // On-demand demand for all of rank 1's host preempts rank 1, and with it the whole gang.
  const gang = await (await page.request.get(`/api/v1/gangs/${gangId}`)).json();
  const rank1 = gang.members.find((m: any) => m.rank === 1);
  const demand = await page.request.post("/api/v1/rentals", {
    headers: { origin },
    data: { host_id: rank1.host_id, gpu_model: gang.gpu_model, gpu_count: 8, kind: "on_demand", workload: { command: "sleep 600" } },
  });
  expect(demand.status(), await demand.text()).toBe(201);
  const demandId: number = (await demand.json()).id;
  try {
    await expect(page.getByTestId("gang-state")).toHaveText("Ended", { timeout: 60_000 });
    const members = page.getByTestId("gang-member");
    await expect(members).toHaveCount(2);
    for (const i of [0, 1]) {
      await expect(members.nth(i)).toContainText("Preempted");
    }
    await expect(page.getByText(`gang #${gangId} is preempted as a whole (its rank 1 was)`)).toBeVisible();
    await snap(page, "gang-spot-preempted");
  } finally {
    await page.request.post(`/api/v1/rentals/${demandId}/stop`, { headers: { origin } });
  }
});
