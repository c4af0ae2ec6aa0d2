#!/usr/bin/env bash
# Runs Cardpool as a cluster on this machine: two replicas on one PostgreSQL database with NATS
# between them, and the local test-mode Stripe as a process of its own. Replica A is the one to
# open; replica B seeds the demo accounts and holds the demo's simulated hosts, so everything
# you do on A about them goes through the bus. Ctrl-C stops all three.
#
# DATABASE_URL picks the database (default: cardpool_cluster on the local PostgreSQL, created
# if missing); CARDPOOL_NATS_URL the NATS server (default nats://127.0.0.1:4222). Extra
# arguments go to both replicas' `cardpool serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$HOME/.cargo/bin:$PATH"
source scripts/lib.sh

./scripts/bootstrap.sh --test   # PostgreSQL and NATS running, and the build tools
cargo leptos build --release --precompress --split

database=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/cardpool_cluster}
unset DATABASE_URL
name=${database##*/}
name=${name%%\?*}
if ! psql "${database%/*}/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = '$name'" | grep -q 1; then
  say "creating database $name"
  psql "${database%/*}/postgres" -qc "CREATE DATABASE \"$name\""
fi
mkdir -p target/cluster-logs
trap stop_cluster EXIT
start_cluster "$root/target/release/cardpool" target/cluster-logs "$database" --site-root "$root/target/site" "$@"
echo
echo "Cardpool cluster: open $SERVER_URL (replica A); replica B at $CLUSTER_B_URL holds the demo hosts."
echo "Logs in target/cluster-logs/. Ctrl-C stops it."
while kill -0 "$SERVER_PID" 2>/dev/null && kill -0 "$CLUSTER_B_PID" 2>/dev/null; do sleep 1; done
