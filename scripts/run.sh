#!/usr/bin/env bash
# Runs Cardpool on this machine: SQLite file ./cardpool.db, demo accounts, http://127.0.0.1:3000.
# Extra arguments go to `cardpool serve` (e.g. --addr 0.0.0.0:8080).
#
# `--check` does everything the plain command does, in a scratch directory and on a free port,
# then loads / and /offers in Chromium, checks they hydrate and that the bundle is served
# compressed and cacheable, stops the server and exits (0 when all of that worked). The test
# command runs it, so CI fails whenever the README's first command would.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$HOME/.cargo/bin:$PATH"

source scripts/lib.sh
check=false
if [[ "${1:-}" == "--check" ]]; then check=true; shift; fi

if $check; then ./scripts/bootstrap.sh --test; else ./scripts/bootstrap.sh; fi
# --precompress writes brotli and gzip copies of the bundle, which the server sends as they are.
cargo leptos build --release --precompress --split

if $check; then
  # The command at the end of this script, from a scratch directory and on a free port.
  trap stop_server EXIT
  log=target/run-check.log
  start_server "$root/target/release/cardpool" "$log" --demo --site-root "$root/target/site"
  say "run.sh --check: loading / and /offers in Chromium"
  if ! (cd end2end && CARDPOOL_E2E_URL="$SERVER_URL" npx playwright test tests/site.spec.ts --project=desktop); then
    tail -n 50 "$log"
    exit 1
  fi
  say "run.sh --check: the release build serves a working demo"
  exit 0
fi

if command -v xdg-open >/dev/null && [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]]; then
  (for _ in $(seq 1 60); do
     curl -fs http://127.0.0.1:3000/healthz >/dev/null 2>&1 && { xdg-open http://127.0.0.1:3000 >/dev/null 2>&1; break; }
     sleep 1
   done) &
fi
exec target/release/cardpool serve --demo --site-root target/site "$@"
