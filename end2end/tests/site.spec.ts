import { expect, test, type Response } from "@playwright/test";
import { failOnCspViolations, hydrated } from "./support";

// The release site as a first visitor gets it (also run alone by `scripts/run.sh --check`):
// the page hydrates, and the bundle arrives compressed, content-hashed and cached for good,
// with the page's own code as a chunk of its own (`--split`) and no other page's.
failOnCspViolations();

for (const [path, own, other] of [["/", "home_route", "offers_route"], ["/offers", "offers_route", "home_route"]]) {
  test(`${path} hydrates with a compressed, immutable bundle`, async ({ page }) => {
    const bundle: Response[] = [];
    page.on("response", (res) => {
      if (/\/pkg\/.*\.(wasm|js|css)$/.test(new URL(res.url()).pathname)) bundle.push(res);
    });
    const response = await page.goto(path);
    expect(response?.status()).toBe(200);
    await hydrated(page);
    const names = bundle.map((res) => new URL(res.url()).pathname);
    expect(names.some((name) => /^\/pkg\/cardpool\.[\w-]+\.wasm$/.test(name)), names.join(", ")).toBe(true);
    expect(names.some((name) => name.includes(`split___${own}_view`)), `${own} chunk in ${names.join(", ")}`).toBe(true);
    expect(names.some((name) => name.includes(`split___${other}_view`)), `${other} chunk fetched for ${path}`).toBe(false);
    for (const res of bundle) {
      const headers = await res.allHeaders();
      expect(["br", "gzip"], `${res.url()} content-encoding`).toContain(headers["content-encoding"]);
      expect(headers["cache-control"], `${res.url()} cache-control`).toContain("immutable");
    }
  });
}
