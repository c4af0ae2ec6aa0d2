#!/usr/bin/env bash
# cardpool-cli, the built binary, as a renter types it, against a running demo server
# (`cardpool serve --demo`): login, offers, rent, ls, show, ssh (through the gateway, into the
# demo host's sandbox), logs, stop, wallet, top-up, --json, --explain, exit codes, logout.
# Usage: scripts/cli-check.sh CLI_BINARY SERVER_URL. Used by scripts/test.sh.
set -euo pipefail
cli_bin=$(realpath "$1")
url=$2
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
cfg="$home/config"

cli() { "$cli_bin" --url "$url" --config-dir "$cfg" "$@"; }
fail() {
  echo "cli-check FAILED: $*" >&2
  echo "--- stdout:" >&2; cat "$home/out" >&2 || true
  echo "--- stderr:" >&2; cat "$home/err" >&2 || true
  exit 1
}
# expect CODE ARGS...: runs the CLI, output in $home/out and $home/err, and checks its exit code.
expect() {
  local want=$1 got=0
  shift
  cli "$@" <"${STDIN:-/dev/null}" >"$home/out" 2>"$home/err" || got=$?
  [[ $got == "$want" ]] || fail "cardpool-cli $* exited $got, not $want"
}
has() { grep -qF -- "$1" "$home/${2:-out}" || fail "no '$1' in the ${2:-out}put"; }
json() { python3 -c "import json,sys; d=json.load(open('$home/out')); print($1)"; }

expect 3 ls
has "not logged in" err
printf 'wrong password\n' >"$home/pw"
STDIN="$home/pw" expect 3 login --email renter@demo.cardpool.dev --password-stdin
printf 'cardpool-demo\n' >"$home/pw"
STDIN="$home/pw" expect 0 login --email renter@demo.cardpool.dev --password-stdin
has "as renter@demo.cardpool.dev"
[[ $(stat -c %a "$cfg/credentials.json") == 600 ]] || fail "credentials.json is not 0600"
expect 0 whoami --json
[[ $(json 'd["email"]') == renter@demo.cardpool.dev ]] || fail "whoami"

# The demo's hosts report, get priced and listed within seconds of the server's start.
warsaw='[o["host_id"] for o in d["offers"] if (o["location"] or "").startswith("Warsaw")]'
for _ in $(seq 60); do
  expect 0 offers --json --per-page 100
  [[ $(json "$warsaw") != "[]" ]] && break
  sleep 1
done
host=$(json "$warsaw[0]") || fail "no Warsaw offer on the demo market within a minute"
expect 0 offers --sort price
has "RTX 4090"

ssh-keygen -q -t ed25519 -N "" -C cli-check -f "$home/key"
expect 8 rent --host "$host" --bid "a lot"
expect 0 rent --host "$host" --ssh-key "$home/key.pub" --command "echo cli-check-started; exec sleep 600" --wait --json
id=$(json 'd["id"]')
[[ $(json 'd["state"]') == running ]] || fail "rental $id is not running"
expect 0 ls
grep -qE "^$id +running" "$home/out" || fail "ls does not list rental $id as running"
expect 0 show "$id"
has "SSH:"
expect 0 ssh "$id" -i "$home/key" -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=accept-new \
  -o "UserKnownHostsFile=$home/known_hosts" -o LogLevel=ERROR -- echo 'inside:$((6*7))'
has "inside:42"
expect 0 logs "$id"
has "cli-check-started"
expect 0 --explain wallet
has "curl -X GET '$url/api/v1/wallet'" err
has '$CARDPOOL_TOKEN' err
expect 0 stop "$id" --wait
has "charged \$"
expect 6 stop "$id"
expect 5 show 999999
expect 0 top-up 10
has "Pay at:"
expect 0 logout
expect 3 whoami
echo "cli-check: login, offers, rent, ls, show, ssh, logs, stop, top-up, logout and exit codes as expected (rental $id)"
