# Shell helpers shared by run.sh --check, test.sh and bench.sh (sourced, not run).

# Each line says how long the script has run, so a slow step in CI's log can be told at a glance.
say() { printf '\033[1;34m==>\033[0m [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server BINARY LOG [serve arguments...]
# Starts `BINARY serve --addr 127.0.0.1:<free port, or $SERVER_PORT> ...` from a scratch directory (so a demo's
# ./cardpool.db and ./.cardpool land there, not in the checkout), waits up to two minutes for
# /healthz, and sets SERVER_URL, SERVER_PID and SERVER_DIR. On failure it prints the log and
# exits. Stop it with stop_server.
start_server() {
  local binary=$1 log=$2 port started
  shift 2
  port=${SERVER_PORT:-$(free_port)}
  SERVER_SSH_PORT=$(free_port)
  SERVER_DIR=$(mktemp -d)
  (cd "$SERVER_DIR" && CARDPOOL_SSH_ADDR="127.0.0.1:$SERVER_SSH_PORT" exec "$binary" serve --addr "127.0.0.1:$port" "$@") \
    >"$log" 2>&1 &
  SERVER_PID=$!
  SERVER_URL="http://127.0.0.1:$port"
  started=$(date +%s)
  until curl -fs "$SERVER_URL/healthz" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || (( $(date +%s) - started > 120 )); then
      cat "$log"
      echo "the server ($binary) did not become healthy" >&2
      stop_server
      exit 1
    fi
    sleep 0.5
  done
  say "server healthy at $SERVER_URL after $(( $(date +%s) - started ))s"
}

stop_server() {
  if [[ -n "${SERVER_PID:-}" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  [[ -n "${SERVER_DIR:-}" ]] && rm -rf "$SERVER_DIR"
  SERVER_PID="" SERVER_DIR=""
}

# start_cluster BINARY LOG_DIR DATABASE_URL [serve arguments for both replicas...]
# A cluster on this machine, as scripts/cluster.sh runs it: the local test-mode Stripe as a
# process of its own, replica B with --demo (it seeds the demo accounts and its simulated hosts'
# agents dial it), then replica A, which people and browsers use; one PostgreSQL database,
# the NATS at $CARDPOOL_NATS_URL (default 127.0.0.1:4222). Sets SERVER_URL and SERVER_SSH_PORT
# (A's, as start_server does) and CLUSTER_B_URL. Stop it with stop_cluster.
start_cluster() {
  local binary=$1 logs=$2 database=$3 port_a stripe_port started
  shift 3
  port_a=$(free_port)
  stripe_port=$(free_port)
  CLUSTER_DIR=$(mktemp -d)
  "$binary" stripe-local --addr "127.0.0.1:$stripe_port" --cardpool-url "http://127.0.0.1:$port_a" \
    --env-file "$CLUSTER_DIR/stripe.env" >"$logs/cluster-stripe.log" 2>&1 &
  CLUSTER_STRIPE_PID=$!
  started=$(date +%s)
  until [[ -s "$CLUSTER_DIR/stripe.env" ]]; do
    if ! kill -0 "$CLUSTER_STRIPE_PID" 2>/dev/null || (( $(date +%s) - started > 30 )); then
      cat "$logs/cluster-stripe.log"
      echo "the local Stripe did not start" >&2
      stop_cluster
      exit 1
    fi
    sleep 0.2
  done
  set -a
  # shellcheck disable=SC1091
  source "$CLUSTER_DIR/stripe.env"
  CARDPOOL_NATS_URL=${CARDPOOL_NATS_URL:-nats://127.0.0.1:4222}
  set +a
  start_server "$binary" "$logs/cluster-b.log" --database-url "$database" --demo "$@"
  CLUSTER_B_PID=$SERVER_PID CLUSTER_B_DIR=$SERVER_DIR CLUSTER_B_URL=$SERVER_URL
  SERVER_PID="" SERVER_DIR=""
  SERVER_PORT=$port_a start_server "$binary" "$logs/cluster-a.log" --database-url "$database" "$@"
  say "cluster: replica A at $SERVER_URL, replica B (demo agents) at $CLUSTER_B_URL"
}

stop_cluster() {
  stop_server
  if [[ -n "${CLUSTER_B_PID:-}" ]]; then
    kill "$CLUSTER_B_PID" 2>/dev/null || true
    wait "$CLUSTER_B_PID" 2>/dev/null || true
  fi
  if [[ -n "${CLUSTER_STRIPE_PID:-}" ]]; then
    kill "$CLUSTER_STRIPE_PID" 2>/dev/null || true
    wait "$CLUSTER_STRIPE_PID" 2>/dev/null || true
  fi
  rm -rf "${CLUSTER_B_DIR:-/nonexistent}" "${CLUSTER_DIR:-/nonexistent}"
  unset CARDPOOL_STRIPE_SECRET_KEY CARDPOOL_STRIPE_WEBHOOK_SECRET CARDPOOL_STRIPE_API_BASE CARDPOOL_NATS_URL
  CLUSTER_B_PID="" CLUSTER_STRIPE_PID="" CLUSTER_B_DIR="" CLUSTER_DIR=""
}
