#!/usr/bin/env bash
# The site's figures, printed: the shipped bundle's sizes and caching, what a first visit to a
# page downloads before it is interactive (end2end/bench/first-load.mjs), throughput and latency
# of the release server at 10,000 hosts on SQLite and PostgreSQL (server/examples/bench_offers.rs),
# Lighthouse's mobile performance and accessibility scores for / and /offers on the demo, and SSH
# through the gateway on the same demo (scripts/bench-ssh.sh).
# Arguments go to bench_offers (`sqlite` or `postgres` for one backend). Takes ~10 min warm.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$HOME/.cargo/bin:$PATH"
source scripts/lib.sh

./scripts/bootstrap.sh --test
export CARDPOOL_TEST_POSTGRES_URL="${CARDPOOL_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
cargo leptos build --release --precompress --split
say "bench_offers (release server, 10,000 hosts)"
RUSTFLAGS="--cfg erase_components" cargo run --release --locked -p cardpool-server --example bench_offers -- "$@"

say "Lighthouse (mobile profile, Debian's Chromium) on the demo"
lighthouse_dir=scripts/lighthouse
if [[ ! -f "$lighthouse_dir/node_modules/.package-lock.json" || "$lighthouse_dir/package-lock.json" -nt "$lighthouse_dir/node_modules/.package-lock.json" ]]; then
  (cd "$lighthouse_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
trap stop_server EXIT
start_server "$root/target/release/cardpool" target/bench-server.log --demo --site-root "$root/target/site"
reports=$(mktemp -d)
for path in / /offers; do
  name=$(echo "$path" | tr -c 'a-z\n' '_')
  CHROME_PATH=/usr/bin/chromium "$lighthouse_dir/node_modules/.bin/lighthouse" "$SERVER_URL$path" --quiet \
    --only-categories=performance,accessibility --output=json --output-path="$reports/$name.json" \
    --chrome-flags="--headless=new --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync"
  node -e '
    const r = require(process.argv[1]);
    const a = (id) => r.audits[id];
    console.log(`${process.argv[2].padEnd(8)} performance ${Math.round(r.categories.performance.score * 100)}  accessibility ${Math.round(r.categories.accessibility.score * 100)}  ` +
      `FCP ${a("first-contentful-paint").displayValue}  LCP ${a("largest-contentful-paint").displayValue}  TBT ${a("total-blocking-time").displayValue}  ` +
      `TTI ${a("interactive").displayValue}  transferred ${Math.round(a("total-byte-weight").numericValue / 1024)} KiB   (goal: both >= 95)`);
    for (const [id, audit] of Object.entries(r.audits)) {
      if (audit.score !== null && audit.score < 0.9 && audit.scoreDisplayMode !== "informative" && audit.scoreDisplayMode !== "manual" && audit.scoreDisplayMode !== "notApplicable")
        console.log(`         needs work: ${id} (${audit.displayValue ?? audit.title})`);
    }' "$reports/$name.json" "$path"
done
rm -rf "$reports"

say "Code a first visit downloads before the page is interactive (shell + the page's chunks)"
(cd end2end && node bench/first-load.mjs "$SERVER_URL" / /offers /sign-in)

say "SSH through the gateway (scp throughput, login time) on the demo"
scripts/bench-ssh.sh "$SERVER_URL" "$SERVER_SSH_PORT"
