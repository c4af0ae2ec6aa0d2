#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit/service/HTTP tests on SQLite and PostgreSQL,
# then Playwright in Chromium against the real server on SQLite and on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
./scripts/bootstrap.sh --test

say() { printf '\033[1;34m==>\033[0m %s\n' "$*"; }
start=$(date +%s)
say "disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free"

# A clean clone builds everything once: incremental caches only cost disk there.
[[ "${CI:-}" == "true" ]] && export CARGO_INCREMENTAL=0

# cargo-leptos debug builds use this flag; using it here too shares one build cache.
export RUSTFLAGS="--cfg erase_components"
export CARDPOOL_TEST_POSTGRES_URL="${CARDPOOL_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"

say "rustfmt"
cargo fmt --all -- --check
say "clippy"
cargo clippy --workspace --exclude cardpool-frontend --all-targets --locked -- -D warnings
cargo clippy -p cardpool-frontend --target wasm32-unknown-unknown --locked -- -D warnings
say "cargo test (SQLite and PostgreSQL)"
cargo test --workspace --exclude cardpool-frontend --locked
say "cargo build -p cardpool-agent (for the browser tests)"
cargo build -p cardpool-agent --locked
say "cargo leptos build"
env -u RUSTFLAGS cargo leptos build   # it adds the same flag itself; twice would rebuild everything

server_pid=""
pg_db=""
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [[ -n "$pg_db" ]] && psql "$CARDPOOL_TEST_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1
  rm -rf "${e2e_tmp:-/nonexistent}"
  true
}
trap cleanup EXIT
e2e_tmp=$(mktemp -d)
rm -rf end2end/screenshots
mkdir -p end2end/test-results

e2e() {
  local backend=$1 url=$2
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  say "Playwright on $backend (port $port)"
  target/debug/cardpool serve --addr "127.0.0.1:$port" --database-url "$url" --demo --site-root target/site \
    >"end2end/test-results/server-$backend.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 120); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "end2end/test-results/server-$backend.log"; exit 1; }
    sleep 0.5
  done
  (cd end2end && CARDPOOL_E2E_URL="http://127.0.0.1:$port" CARDPOOL_E2E_BACKEND="$backend" \
    CARDPOOL_AGENT_BIN="$PWD/../target/debug/cardpool-agent" npx playwright test)
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

e2e sqlite "sqlite://$e2e_tmp/e2e.db?mode=rwc"
pg_db="cardpool_e2e_$$"
psql "$CARDPOOL_TEST_POSTGRES_URL" -qc "CREATE DATABASE $pg_db" >/dev/null
e2e postgres "${CARDPOOL_TEST_POSTGRES_URL%/*}/$pg_db"

say "all tests passed in $(( $(date +%s) - start ))s (screenshots in end2end/screenshots/)"
