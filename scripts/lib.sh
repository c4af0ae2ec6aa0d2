# Shell helpers shared by run.sh --check, test.sh and bench.sh (sourced, not run).

say() { printf '\033[1;34m==>\033[0m %s\n' "$*"; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server BINARY LOG [serve arguments...]
# Starts `BINARY serve --addr 127.0.0.1:<free port> ...` from a scratch directory (so a demo's
# ./cardpool.db and ./.cardpool land there, not in the checkout), waits up to two minutes for
# /healthz, and sets SERVER_URL, SERVER_PID and SERVER_DIR. On failure it prints the log and
# exits. Stop it with stop_server.
start_server() {
  local binary=$1 log=$2 port started
  shift 2
  port=$(free_port)
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
