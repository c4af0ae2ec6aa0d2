import { expect, test, type Page } from "@playwright/test";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { endRentalsAfterFailure, failOnCspViolations, hydrated, micros, signIn, snap } from "./support";

const run = promisify(execFile);

// Renting in the browser against the demo server, whose simulated hosts' agents attach GPUs
// for real (the workload process runs, gets signals and notices; the GPUs are simulated):
// an on-demand rental is booked, seen provisioning then running, stopped, and its exact
// charge is what left the wallet; a spot rental is preempted by an on-demand booking, gets its
// notice and ends as preempted. Every rental is ended again, so the market is as it was.
failOnCspViolations();
endRentalsAfterFailure();

async function balance(page: Page): Promise<bigint> {
  await page.goto("/wallet");
  const text = await page.getByTestId("wallet-balance").innerText();
  return micros(text);
}

/** Workloads run for real, in the demo hosts' sandboxes: a training loop, and a sweep that
 * checkpoints on SIGTERM and keeps going until the preemption deadline. */
const TRAIN = 'for i in $(seq 1 3600); do echo "epoch $i"; sleep 1; done';
const SWEEP = "trap 'echo checkpointing' TERM; while :; do echo step; sleep 1; done";

/** Books from the Warsaw RTX 4090 offer (2 GPUs) and returns the rental page's URL. */
async function book(
  page: Page,
  kind: "on_demand" | "spot" | "reserved",
  gpus: number,
  command: string,
  bid?: string,
  window?: { start: string; hours: string },
) {
  await page.goto(`/offers?location=PL&kind=${kind}`);
  await page.getByTestId("offer-rent").first().click();
  await expect(page.getByRole("heading", { name: "Rent GPUs" })).toBeVisible();
  await hydrated(page);
  await expect(page.getByLabel("Rental kind")).toHaveValue(kind);
  await page.getByLabel("Number of GPUs").fill(String(gpus));
  await page.getByLabel("Command").fill(command);
  if (bid) await page.getByLabel("Your bid ($ per GPU-hour)").fill(bid);
  if (window) {
    await page.getByLabel("Starts at (UTC)").fill(window.start);
    await page.getByLabel("Hours", { exact: true }).fill(window.hours);
  }
  await page.getByRole("button", { name: "Book" }).click();
  await expect(page).toHaveURL(/\/rentals\/\d+$/);
  return page.url();
}

/** A fresh key pair made by OpenSSH's ssh-keygen, in a directory of its own. */
async function sshKey() {
  const dir = mkdtempSync(join(tmpdir(), "cardpool-e2e-ssh-"));
  const key = join(dir, "id_ed25519");
  await run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "e2e@laptop", "-f", key]);
  return { dir, key, publicKey: readFileSync(`${key}.pub`, "utf8").trim() };
}

test("a renter books on-demand, watches it start, stops it and pays exactly its charge", async ({ page }) => {
  test.setTimeout(120_000);
  await signIn(page, "renter@demo.cardpool.dev");
  const before = await balance(page);

  // The renter puts their SSH key on the account.
  const ssh = await sshKey();
  await page.goto("/account/ssh-keys");
  await hydrated(page);
  await page.getByLabel("Public key").fill(ssh.publicKey);
  await page.getByRole("button", { name: "Add key" }).click();
  await expect(page.getByTestId("ssh-key-row").filter({ hasText: "e2e@laptop" }).first()).toBeVisible();
  await expect(page.getByRole("status")).toContainText("added");
  await expect(page.getByLabel("Public key")).toHaveValue("");
  await snap(page, "ssh-keys");

  // A mistake is explained on the form and books nothing.
  await page.goto("/offers?location=PL");
  await page.getByTestId("offer-rent").first().click();
  await hydrated(page);
  await page.getByLabel("Number of GPUs").fill("1");
  await page.getByRole("button", { name: "Book" }).click();
  await expect(page.getByText("give a command to run or a container image")).toBeVisible();
  await snap(page, "rent-form-error");

  const url = await book(page, "on_demand", 1, TRAIN);
  // Booked → attaching → running, shown as it happens.
  await expect(page.getByTestId("rental-timeline")).toContainText("booked by the renter");
  await expect(page.getByTestId("rental-state")).toHaveText("Running", { timeout: 30_000 });
  await expect(page.getByTestId("rental-timeline")).toContainText("billing started");
  // The page shows the command that gets in; with the account's key it opens a shell inside
  // the rental, on its GPU, through Cardpool (the host opens no port).
  const command = (await page.getByTestId("ssh-command").innerText()).trim();
  expect(command).toMatch(/^ssh -p \d+ r\d+@127\.0\.0\.1$/);
  const [, , port, destination] = command.split(" ");
  const options = ["-i", ssh.key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"];
  options.push("-o", `UserKnownHostsFile=${join(ssh.dir, "known_hosts")}`, "-p", port);
  const shell = await run("ssh", [...options, destination, 'echo "on $(hostname) with $CUDA_VISIBLE_DEVICES"'], { timeout: 30_000 });
  expect(shell.stdout).toMatch(/^on rental-\d+ with GPU-/);
  await expect(page.getByTestId("ssh-host-key")).toContainText("SHA256:");
  // The workload's output arrives live, line by line, from the sandbox on the host.
  await expect(page.getByTestId("logs-state")).toHaveText("Live", { timeout: 15_000 });
  await expect(page.getByTestId("rental-logs")).toContainText("epoch 3", { timeout: 15_000 });
  // Paused, it stops following; resumed, it goes on from where it was.
  await page.getByTestId("logs-pause").click();
  await expect(page.getByTestId("logs-state")).toHaveText("Paused");
  await page.getByTestId("logs-pause").click();
  await expect(page.getByTestId("rental-logs")).toContainText("epoch 6", { timeout: 15_000 });
  const shown = await page.getByTestId("rental-logs").innerText();
  const epochs = shown.split("\n").filter((l) => l.startsWith("epoch "));
  expect(new Set(epochs).size).toBe(epochs.length);
  await snap(page, "rental-running");
  // Its cost grows by the second while it runs.
  await expect(page.getByTestId("rental-cost")).not.toHaveText("$0.00", { timeout: 10_000 });
  await page.getByRole("button", { name: "Stop rental" }).click();
  await expect(page.getByTestId("rental-state")).toHaveText("Ended", { timeout: 30_000 });
  const charged = micros(await page.getByTestId("rental-charged").innerText());
  expect(charged).toBeGreaterThan(0n);
  // Once ended, everything it cost has been charged.
  await expect(page.getByTestId("rental-cost")).toHaveText(await page.getByTestId("rental-charged").innerText());
  await expect(page.getByTestId("rental-timeline")).toContainText("stop requested by the renter");
  await snap(page, "rental-ended");

  // Exactly the rental's charge left the wallet.
  expect(await balance(page)).toBe(before - charged);
  await page.goto("/rentals");
  await expect(page.locator(`a[href="${new URL(url).pathname}"]`)).toContainText("Ended");
  await snap(page, "rentals");
});

test("a spot rental preempted by an on-demand booking gets its notice and ends as preempted", async ({ page }) => {
  test.setTimeout(150_000);
  await signIn(page, "renter@demo.cardpool.dev");
  const spot = await book(page, "spot", 1, SWEEP, "0.20");
  await expect(page.getByTestId("rental-state")).toHaveText("Running", { timeout: 30_000 });
  await expect(page.getByText("Your bid: $0.20/GPU-h")).toBeVisible();

  // On-demand for both GPUs of that host needs the spot rental's GPU.
  const onDemand = await book(page, "on_demand", 2, TRAIN);
  await page.goto(spot);
  await expect(page.getByTestId("rental-state")).toHaveText("Preempting");
  await expect(page.getByTestId("rental-notice")).toContainText("Preempted: this spot rental stops at");
  await snap(page, "rental-preempting");
  // After the notice period (30 s) the agent stops the workload.
  await expect(page.getByTestId("rental-state")).toHaveText("Preempted", { timeout: 60_000 });
  await expect(page.getByTestId("rental-timeline")).toContainText("preempted by higher-priority demand");

  await page.goto(onDemand);
  await expect(page.getByTestId("rental-state")).toHaveText("Running", { timeout: 30_000 });
  await page.getByRole("button", { name: "Stop rental" }).click();
  await expect(page.getByTestId("rental-state")).toHaveText("Ended", { timeout: 30_000 });
});

test("a reserved window is prepaid, runs when it begins and is paid in full when stopped", async ({ page }) => {
  test.setTimeout(120_000);
  await signIn(page, "renter@demo.cardpool.dev");
  const before = await balance(page);
  // A window starting this minute (UTC) for one hour at the reserved price, $0.312/GPU-h.
  // Not picked in a minute's last seconds: booking would land in the next one, after the start.
  const seconds = new Date().getUTCSeconds();
  if (seconds > 40) await page.waitForTimeout((61 - seconds) * 1000);
  const start = new Date().toISOString().slice(0, 16);
  const url = await book(page, "reserved", 1, TRAIN, undefined, { start, hours: "1" });
  await expect(page.getByTestId("rental-window")).toContainText("UTC");
  await expect(page.getByTestId("rental-state")).toHaveText("Running", { timeout: 30_000 });
  await snap(page, "rental-reserved");
  // Prepaid: the hour left the wallet at booking (into held funds).
  const prepaid = 312_000n;
  expect(await balance(page)).toBe(before - prepaid);
  await page.goto(url);
  await hydrated(page);
  await page.getByRole("button", { name: "Stop rental" }).click();
  await expect(page.getByTestId("rental-state")).toHaveText("Ended", { timeout: 30_000 });
  // Given up by the renter: the window is paid to the provider, nothing comes back.
  await expect(page.getByTestId("rental-charged")).toHaveText("$0.312");
  expect(await balance(page)).toBe(before - prepaid);
});
