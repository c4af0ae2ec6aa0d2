import { expect, test, type Page, type Response } from "@playwright/test";
import { failOnCspViolations, hydrated } from "./support";

// The release site as a first visitor gets it (also run alone by `scripts/run.sh --check`):
// the page hydrates, and the bundle arrives compressed, content-hashed and cached for good.
// The landing pages are in the shell; every other page's code is a chunk of its own
// (`--split`), fetched when that page is first shown.
failOnCspViolations();

function watchBundle(page: Page): Response[] {
  const bundle: Response[] = [];
  page.on("response", (res) => {
    if (/\/pkg\/.*\.(wasm|js|css)$/.test(new URL(res.url()).pathname)) bundle.push(res);
  });
  return bundle;
}

async function expectCompressedAndImmutable(bundle: Response[]) {
  for (const res of bundle) {
    const headers = await res.allHeaders();
    expect(["br", "gzip"], `${res.url()} content-encoding`).toContain(headers["content-encoding"]);
    expect(headers["cache-control"], `${res.url()} cache-control`).toContain("immutable");
  }
}

for (const path of ["/", "/offers"]) {
  test(`${path} hydrates with a compressed, immutable bundle`, async ({ page }) => {
    const bundle = watchBundle(page);
    const response = await page.goto(path);
    expect(response?.status()).toBe(200);
    await hydrated(page);
    const names = bundle.map((res) => new URL(res.url()).pathname);
    expect(names.some((name) => /^\/pkg\/cardpool\.[\w-]+\.wasm$/.test(name)), names.join(", ")).toBe(true);
    expect(names.filter((name) => name.includes("split___")), "no other page's code").toEqual([]);
    await expectCompressedAndImmutable(bundle);
  });
}

test("another page's code arrives when that page is first shown", async ({ page }) => {
  const bundle = watchBundle(page);
  await page.goto("/");
  await hydrated(page);
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { level: 1, name: "Sign in" })).toBeVisible();
  const names = bundle.map((res) => new URL(res.url()).pathname);
  expect(names.some((name) => name.includes("split___sign_in_route_view")), names.join(", ")).toBe(true);
  await expectCompressedAndImmutable(bundle);
});
