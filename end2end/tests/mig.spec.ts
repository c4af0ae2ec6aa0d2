import { expect, test } from "@playwright/test";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { endRentalsAfterFailure, failOnCspViolations, hydrated, signIn, signUp, snap } from "./support";

// MIG slices as units of sale, in the browser: a provider's agent reports an H100 cut into
// 3g.40gb + 2g.20gb + 1g.10gb ×2; the provider sells it as slices and prices each profile per
// slice-hour; a renter finds a 1g.10gb slice among the offers, rents it, sees it run and stops
// it; the host's fabric, declared by its provider, shows on the offer. Then the provider re-carves
// the GPU from the host page (refused while rented; the agent carves it once the rental ended).
// The host is taken off the market at the end (its agent stops), so the market is as it was.
const agentBin = process.env.CARDPOOL_AGENT_BIN ?? "../target/debug/cardpool-agent";
const LAYOUT = "1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2";
const SLICE = "NVIDIA H100 80GB HBM3 MIG 1g.10gb";
/** Says which devices it was given, then trains for ten minutes. */
const FINETUNE = 'echo "devices=$CUDA_VISIBLE_DEVICES"; for i in $(seq 1 600); do echo "step $i"; sleep 1; done';

failOnCspViolations();
endRentalsAfterFailure();

test("a provider sells a GPU as MIG slices and a renter rents a 1g.10gb slice", async ({ page, browser, baseURL }, info) => {
  test.setTimeout(150_000);
  const provider = await browser.newContext({ baseURL });
  const host = await provider.newPage();
  await signUp(host, `mig-${info.project.name}-${Date.now()}@example.com`);
  await hydrated(host);
  await host.getByRole("button", { name: "Become a provider" }).click();
  await expect(host.getByTestId("account-roles")).toContainText("provider");
  await host.goto("/provider/hosts");
  await hydrated(host);
  await host.getByLabel("Location shown to renters").fill("Slice Lab, EU");
  await host.getByRole("button", { name: "Create enrollment token" }).click();
  const token = (await host.getByTestId("enroll-token").textContent())!.trim();

  const stateDir = mkdtempSync(join(tmpdir(), "cardpool-agent-mig-"));
  let agent: ChildProcess | undefined;
  try {
    const enroll = spawnSync(agentBin, ["enroll", "--server", baseURL!, "--token", token, "--state-dir", stateDir], { encoding: "utf8" });
    expect(enroll.status, enroll.stderr).toBe(0);
    agent = spawn(agentBin, ["run", "--state-dir", stateDir, "--simulate", LAYOUT], { stdio: "ignore" });
    const row = host.getByTestId("host-row");
    await expect(row.getByTestId("host-status")).toHaveText("online", { timeout: 20_000 });
    await row.getByRole("link").click();

    // Reported and sold whole at first; one click sells it as its four slices.
    const tile = host.getByTestId("gpu-tile");
    await expect(tile.getByTestId("mig-instances").locator("li")).toHaveCount(4);
    await expect(tile.getByTestId("gpu-sold-as")).toHaveText("Sold whole");
    await hydrated(host);
    await tile.getByRole("button", { name: "Sell as MIG slices" }).click();
    await expect(tile.getByTestId("gpu-sold-as")).toHaveText("Sold as MIG slices");

    // Each profile is priced per slice-hour; listing needs them all.
    for (const [profile, price] of [["1g.10gb", "0.39"], ["2g.20gb", "0.75"], ["3g.40gb", "1.10"]]) {
      const form = host.locator("form").filter({ hasText: `MIG ${profile}` });
      await form.getByLabel("On-demand $/slice-h").fill(price);
      await form.getByLabel("Reserved $/slice-h").fill(price);
      await form.getByLabel("Spot minimum bid $/slice-h").fill("0.10");
      await form.getByRole("button", { name: "Save prices" }).click();
      await expect(host.getByText("Prices saved.")).toBeVisible();
    }
    // Listing checks every unit's price: wait until all three are stored.
    const api = host.url().replace("/provider/hosts/", "/api/v1/hosts/");
    await expect.poll(async () => (await (await host.request.get(api)).json()).prices.length).toBe(3);
    await host.getByRole("button", { name: "List on the market" }).click();
    await expect(host.getByTestId("listing-state")).toHaveText("listed on the market");
    // Its fabric, declared: this machine's agent reports no 400G InfiniBand link, so it shows
    // as declared, not checked.
    await host.getByLabel("Fabric id").fill("Slice-Lab-IB");
    await host.getByLabel("Interconnect").selectOption("infiniband");
    await host.getByLabel("Link speed (Gb/s)").fill("400");
    await host.getByRole("button", { name: "Save fabric" }).click();
    await expect(host.getByTestId("fabric-state")).toContainText("InfiniBand 400 Gb/s · fabric slice-lab-ib (declared)");
    await snap(host, "host-mig-slices");

    // The renter asks for slices of one profile at this host's location and finds two free.
    await signIn(page, "renter@demo.cardpool.dev");
    await page.goto("/offers");
    await page.getByLabel("Unit").selectOption("slice");
    await page.getByLabel("MIG profile").fill("1g.10gb");
    await page.getByLabel("Location").fill("Slice Lab");
    await page.getByRole("button", { name: "Search" }).click();
    await expect(page).toHaveURL(/unit=slice/);
    const offer = page.getByTestId("offer");
    await expect(offer).toHaveCount(1);
    await expect(offer.getByTestId("offer-model")).toHaveText(SLICE);
    await expect(offer.getByTestId("offer-mig")).toHaveText("MIG slice 1g.10gb");
    await expect(offer.getByTestId("offer-free")).toHaveText("2 free");
    await expect(offer).toContainText("10 GiB per slice");
    await expect(offer.getByTestId("fabric")).toContainText("fabric slice-lab-ib");
    await snap(page, "offers-mig");

    await offer.getByTestId("offer-rent").click();
    await hydrated(page);
    await page.getByLabel("Number of GPUs").fill("1");
    await page.getByLabel("Command").fill(FINETUNE);
    await page.getByRole("button", { name: "Book" }).click();
    await expect(page).toHaveURL(/\/rentals\/\d+$/);
    const rental = page.url();
    await expect(page.getByTestId("rental-state")).toHaveText("Running", { timeout: 30_000 });
    await expect(page.getByText(SLICE).first()).toBeVisible();
    await expect(page.getByTestId("rental-slice")).toContainText("1× 1g.10gb");
    await expect(page.getByTestId("rental-slice")).toContainText("of GPU 0");
    // The workload runs in the host's sandbox and sees one device: its slice.
    await expect(page.getByTestId("rental-logs")).toContainText("devices=MIG-", { timeout: 15_000 });
    await expect(page.getByTestId("rental-logs")).not.toContainText("devices=GPU-");
    await snap(page, "rental-mig-slice");

    // One slice rented: one left, and the GPU cannot be sold whole meanwhile.
    await page.goto("/offers?unit=slice&mig_profile=1g.10gb&location=Slice+Lab");
    await expect(page.getByTestId("offer").getByTestId("offer-free")).toHaveText("1 free");
    await tile.getByRole("button", { name: "Sell whole" }).click();
    await expect(host.getByRole("alert").filter({ hasText: "is rented or reserved" })).toBeVisible();

    // Nor re-carved: its agent can carve it (MIG on; root or the simulator), but not under a rental.
    const layout = tile.getByLabel("MIG layout");
    await expect(tile.getByTestId("mig-profiles")).toContainText("7g.80gb");
    await layout.fill("1g.10gb*7");
    await tile.getByRole("button", { name: "Apply layout" }).click();
    await expect(tile.getByRole("alert").filter({ hasText: "change its MIG layout once its rentals have ended" })).toBeVisible();

    await page.goto(rental);
    await hydrated(page);
    await page.getByRole("button", { name: "Stop rental" }).click();
    await expect(page.getByTestId("rental-state")).toHaveText("Ended", { timeout: 30_000 });

    // Ended: a layout that does not fit is refused with the reason; seven 1g.10gb slices are
    // carved by the agent and replace the four.
    await layout.fill("7g.80gb+1g.10gb");
    await tile.getByRole("button", { name: "Apply layout" }).click();
    await expect(tile.getByRole("alert").filter({ hasText: "8 compute slices" })).toBeVisible();
    await layout.fill("1g.10gb*7");
    await tile.getByRole("button", { name: "Apply layout" }).click();
    await expect(tile.getByTestId("mig-instances").locator("li")).toHaveCount(7, { timeout: 30_000 });
    await expect(tile.getByTestId("mig-layout-pending")).toHaveCount(0);
    await expect(tile.getByTestId("gpu-sold-as")).toHaveText("Sold as MIG slices");
    await snap(host, "host-mig-layout");
  } finally {
    agent?.kill("SIGKILL");
    rmSync(stateDir, { recursive: true, force: true });
    await provider.close();
  }
});
