#!/usr/bin/env bash
# Checks the systemd units in deploy/systemd with `systemd-analyze verify` (syntax, known
# directives, a runnable ExecStart), pointing ExecStart at the binaries this checkout built.
# Usage: scripts/check-units.sh SERVER_BINARY AGENT_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
server=$(realpath "$1") agent=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/local/bin/cardpool |$server |" deploy/systemd/cardpool.service >"$dir/cardpool.service"
sed "s|/usr/local/bin/cardpool-agent |$agent |" deploy/systemd/cardpool-agent.service >"$dir/cardpool-agent.service"
out=$(systemd-analyze verify "$dir/cardpool.service" "$dir/cardpool-agent.service" 2>&1) || {
  echo "$out" >&2
  exit 1
}
# verify exits 0 on some warnings; any line it prints about our units is a defect.
if grep -E "cardpool(-agent)?\.service" <<<"$out" >&2; then
  exit 1
fi
echo "systemd units verified: deploy/systemd/{cardpool,cardpool-agent}.service"
