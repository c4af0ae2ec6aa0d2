import { expect, test } from "@playwright/test";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { failOnCspViolations, hydrated, signUp, snap } from "./support";

// The agent binary built by scripts/test.sh; enrolled and run from here like a provider would.
const agentBin = process.env.CARDPOOL_AGENT_BIN ?? "../target/debug/cardpool-agent";

failOnCspViolations();

test("a provider enrolls a simulated host with one agent command and sees it online", async ({ page, baseURL }, info) => {
  const email = `host-${info.project.name}-${Date.now()}@example.com`;
  await signUp(page, email);

  await hydrated(page);
  await page.getByRole("button", { name: "Become a provider" }).click();
  await expect(page.getByTestId("account-roles")).toContainText("provider");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Hosts" }).click();
  await expect(page.getByRole("heading", { name: "Hosts", exact: true })).toBeVisible();
  await expect(page.getByText("No hosts yet.")).toBeVisible();

  await page.getByLabel("Location shown to renters").fill("Test Lab, EU");
  await page.getByRole("button", { name: "Create enrollment token" }).click();
  const command = page.getByTestId("enroll-command");
  await expect(command).toContainText("cardpool-agent enroll --server");
  const token = (await page.getByTestId("enroll-token").textContent())!.trim();
  await snap(page, "hosts-enroll");

  const stateDir = mkdtempSync(join(tmpdir(), "cardpool-agent-e2e-"));
  let agent: ChildProcess | undefined;
  try {
    const enroll = spawnSync(agentBin, ["enroll", "--server", baseURL!, "--token", token, "--state-dir", stateDir], { encoding: "utf8" });
    expect(enroll.status, enroll.stderr).toBe(0);
    // The same token again: refused.
    const replay = spawnSync(agentBin, ["enroll", "--server", baseURL!, "--token", token, "--state-dir", stateDir + "-2"], { encoding: "utf8" });
    expect(replay.status).not.toBe(0);
    expect(replay.stderr).toContain("already used");

    agent = spawn(agentBin, ["run", "--state-dir", stateDir, "--simulate", "2xH100-80GB"], { stdio: "ignore" });
    // No reload: the list refreshes itself.
    const row = page.getByTestId("host-row");
    await expect(row).toHaveCount(1);
    await expect(row.getByTestId("host-status")).toHaveText("online", { timeout: 20_000 });
    await expect(row).toContainText("2× NVIDIA H100 80GB HBM3");
    await snap(page, "hosts-online");

    await row.getByRole("link").click();
    await expect(page.getByTestId("gpu-tile")).toHaveCount(2);
    await expect(page.getByText("agent connected")).toBeVisible();
    await expect(page.getByTestId("self-test-outcome")).toHaveText("passed");

    // Pricing: dollars in, exact integers stored; a bad value gets a field error.
    await hydrated(page);
    await page.getByLabel("On-demand $/GPU-h").fill("abc");
    await page.getByLabel("Reserved $/GPU-h").fill("1.99");
    await page.getByLabel("Spot minimum bid $/GPU-h").fill("0.80");
    await page.getByRole("button", { name: "Save prices" }).click();
    await expect(page.getByText('"abc" is not an amount in dollars (e.g. 2.49)')).toBeVisible();
    await page.getByLabel("On-demand $/GPU-h").fill("2.49");
    await page.getByRole("button", { name: "Save prices" }).click();
    await expect(page.getByText("Prices saved.")).toBeVisible();
    await page.getByRole("button", { name: "List on the market" }).click();
    await expect(page.getByTestId("listing-state")).toHaveText("listed on the market");
    await expect(page.getByLabel("On-demand $/GPU-h")).toHaveValue("2.49");
    await snap(page, "host-detail");
    const api = await page.request.get(page.url().replace("/provider/hosts/", "/api/v1/hosts/"));
    const detail = await api.json();
    expect(detail.prices[0]).toMatchObject({ on_demand_micros: 2490000, reserved_micros: 1990000, spot_min_bid_micros: 800000 });
    expect(detail.host.listed).toBe(true);

    // A stopped agent is not an outage at once (it may be restarting); a host silent past the
    // offline grace (5 s on the test servers) is offline.
    agent.kill("SIGTERM");
    await expect(page.getByRole("heading").getByTestId("host-status")).toHaveText("offline", { timeout: 20_000 });
    await expect(page.getByText("missed heartbeats")).toBeVisible();
  } finally {
    agent?.kill("SIGKILL");
    rmSync(stateDir, { recursive: true, force: true });
  }
});
