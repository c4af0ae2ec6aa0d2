#!/usr/bin/env bash
# Runs Cardpool on this machine: SQLite file ./cardpool.db, demo accounts, http://127.0.0.1:3000.
# Extra arguments go to `cardpool serve` (e.g. --addr 0.0.0.0:8080).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
./scripts/bootstrap.sh
cargo leptos build --release
if command -v xdg-open >/dev/null && [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]]; then
  (for _ in $(seq 1 60); do
     curl -fs http://127.0.0.1:3000/healthz >/dev/null 2>&1 && { xdg-open http://127.0.0.1:3000 >/dev/null 2>&1; break; }
     sleep 1
   done) &
fi
exec target/release/cardpool serve --demo --site-root target/site "$@"
