#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit/service/HTTP tests on SQLite and PostgreSQL,
# the README's run command checked on the release build (scripts/run.sh --check), the renter's
# CLI (scripts/cli-check.sh) and schemathesis against that release server, then Playwright in Chromium against it on SQLite and
# against a two-replica cluster on PostgreSQL and NATS.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
./scripts/bootstrap.sh --test
source scripts/lib.sh
start=$(date +%s)
say "disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free"

# A clean clone builds everything once: incremental caches only cost disk there.
[[ "${CI:-}" == "true" ]] && export CARGO_INCREMENTAL=0

# Views are type-erased in every cargo-leptos build (`always-erase-components`); the tests
# compile the app the same way.
export RUSTFLAGS="--cfg erase_components"
export CARDPOOL_TEST_POSTGRES_URL="${CARDPOOL_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
export CARDPOOL_TEST_NATS_URL="${CARDPOOL_TEST_NATS_URL:-nats://127.0.0.1:4222}"

say "rustfmt"
cargo fmt --all -- --check
say "clippy"
cargo clippy --workspace --exclude cardpool-frontend --all-targets --locked -- -D warnings
cargo clippy -p cardpool-frontend --target wasm32-unknown-unknown --locked -- -D warnings
say "cargo test (SQLite and PostgreSQL)"
cargo test --workspace --exclude cardpool-frontend --locked
say "cargo build -p cardpool-agent -p cardpool-cli (for the CLI and browser tests)"
cargo build -p cardpool-agent -p cardpool-cli --locked
# The README's first command, checked: the release site is built (and kept for the browser
# tests below), started as run.sh starts it, and / and /offers must hydrate in Chromium.
say "scripts/run.sh --check"
env -u RUSTFLAGS ./scripts/run.sh --check   # cargo-leptos sets its own flags
say "systemd units (deploy/systemd) against the binaries just built"
./scripts/check-units.sh target/release/cardpool target/debug/cardpool-agent
say "the Dockerfile's runtime stage, from that release build (no Docker engine runs here)"
./scripts/check-image.sh

pg_db=""
cleanup() {
  stop_cluster
  [[ -n "$pg_db" ]] && psql "$CARDPOOL_TEST_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1
  rm -rf "${e2e_tmp:-/nonexistent}"
  true
}
trap cleanup EXIT
e2e_tmp=$(mktemp -d)
rm -rf end2end/screenshots
# Playwright empties end2end/test-results/ when it starts, so the servers log beside the build.
mkdir -p target/e2e-logs

# The renter's CLI, the binary, and then the API's contract (schemathesis), each against a
# fresh release demo of its own (both book, add keys and tokens as the demo renter).
say "cardpool-cli and schemathesis against the release demo"
start_server "$PWD/target/release/cardpool" target/e2e-logs/server-cli.log --demo --site-root "$PWD/target/site"
./scripts/cli-check.sh target/debug/cardpool-cli "$SERVER_URL"
stop_server
start_server "$PWD/target/release/cardpool" target/e2e-logs/server-schemathesis.log --demo --site-root "$PWD/target/site"
./scripts/schemathesis.sh "$SERVER_URL"
stop_server

# Playwright against the release server run.sh --check just built and checked: one process on
# SQLite, then a two-replica cluster on PostgreSQL and NATS (scripts/cluster.sh's: the demo's
# hosts connected to replica B, the browser on replica A, so bookings, live charts, logs and
# SSH all cross the bus). Its hosts beat every second and a silent one is offline after 5 s
# (and judged from 10 s after start), so a test that stops an agent sees the host go offline
# without waiting the production 20 s.
e2e() {
  local backend=$1 url=$2 logs
  say "Playwright on $backend"
  export CARDPOOL_HEARTBEAT_INTERVAL_SECS=1 CARDPOOL_HOST_OFFLINE_GRACE_SECS=5 CARDPOOL_AGENT_RECONNECT_SECS=5
  # The webhook test's receiver listens on this machine (the cluster's replica A runs without
  # --demo, which allows that by itself).
  export CARDPOOL_WEBHOOKS_ALLOW_LOCAL=true
  if [[ $backend == cluster ]]; then
    start_cluster "$PWD/target/release/cardpool" target/e2e-logs "$url" --site-root "$PWD/target/site"
    logs="target/e2e-logs/cluster-a.log target/e2e-logs/cluster-b.log"
  else
    start_server "$PWD/target/release/cardpool" "target/e2e-logs/server-$backend.log" \
      --database-url "$url" --demo --site-root "$PWD/target/site"
    logs="target/e2e-logs/server-$backend.log"
  fi
  local report="target/e2e-logs/playwright-$backend.txt"
  if ! (cd end2end && CARDPOOL_E2E_URL="$SERVER_URL" CARDPOOL_E2E_BACKEND="$backend" \
    CARDPOOL_AGENT_BIN="$PWD/../target/debug/cardpool-agent" npx playwright test) 2>&1 | tee "$report"; then
    # Printed last, so the end of a failed run's output says which test failed and why: first
    # the servers' logs around it, then Playwright's summary of the failures.
    for log in $logs; do
      say "Playwright failed on $backend; $log's last warnings and errors:"
      grep -aE ' (WARN|ERROR)([^A-Za-z]|$)' "$log" | tail -n 40 || true
      say "$log ends:"
      tail -n 30 "$log"
    done
    # What the failed tests' live rentals had been through (support.ts prints it).
    grep -a -A8 'after the failure: rental .* on host' "$report" | head -n 80 || true
    say "Playwright's failures on $backend (all of its output: $report):"
    # Each failure's title and the first lines of its error; then the counts.
    awk '/^  [0-9]+\) /{n=8} n>0 && NF {print; n--} /^  [0-9]+ (failed|flaky|did not run|passed)/' "$report"
    exit 1
  fi
  if [[ $backend == cluster ]]; then stop_cluster; else stop_server; fi
  unset CARDPOOL_HEARTBEAT_INTERVAL_SECS CARDPOOL_HOST_OFFLINE_GRACE_SECS CARDPOOL_AGENT_RECONNECT_SECS
  unset CARDPOOL_WEBHOOKS_ALLOW_LOCAL
}

e2e sqlite "sqlite://$e2e_tmp/e2e.db?mode=rwc"
pg_db="cardpool_e2e_$$"
psql "$CARDPOOL_TEST_POSTGRES_URL" -qc "CREATE DATABASE $pg_db" >/dev/null
e2e cluster "${CARDPOOL_TEST_POSTGRES_URL%/*}/$pg_db"

say "all tests passed in $(( $(date +%s) - start ))s (screenshots in end2end/screenshots/)"
