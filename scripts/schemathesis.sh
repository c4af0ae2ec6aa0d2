#!/usr/bin/env bash
# schemathesis (PyPI) against the API of a running Cardpool demo server:
#   scripts/schemathesis.sh http://127.0.0.1:3000
# Signs in as the demo renter, makes an API token, and runs every check on at least 1,000
# generated requests, operations that end its own access (revoking the token, signing out,
# changing the password) left out. Must find no server error, every response must be the
# status, content type and schema the document says, schema-violating requests must be
# refused and schema-valid ones accepted; scripts/schemathesis.toml lists the operations whose
# rules the document does not express yet, for which the last check is off. The seed is
# fixed: the run is the same each time.
set -euo pipefail
cd "$(dirname "$0")/.."
url=${1:?usage: scripts/schemathesis.sh SERVER_URL}
venv=target/tools/schemathesis
[[ -x $venv/bin/schemathesis ]] || ./scripts/bootstrap.sh --test
jar=$(mktemp)
trap 'rm -f "$jar"' EXIT
curl -fsS -c "$jar" -H "Origin: $url" -H 'content-type: application/json' \
  -d '{"email":"renter@demo.cardpool.dev","password":"cardpool-demo"}' "$url/api/v1/auth/sign-in" >/dev/null
token=$(curl -fsS -b "$jar" -H "Origin: $url" -H 'content-type: application/json' -d '{"name":"schemathesis"}' \
  "$url/api/v1/tokens" | python3 -c 'import json, sys; print(json.load(sys.stdin)["secret"])')
out=$(mktemp)
status=0
"$venv/bin/schemathesis" --config-file scripts/schemathesis.toml run "$url/api/v1/openapi.json" \
  -H "Authorization: Bearer $token" -H "Origin: $url" \
  --exclude-operation-id revoke_api_token --exclude-operation-id sign_out --exclude-operation-id change_password \
  --max-examples 25 --workers 1 --seed 1 --suppress-health-check all --no-color >"$out" 2>&1 || status=$?
if (( status != 0 )); then cat "$out"; else tail -n 25 "$out"; fi
generated=$(grep -oE '[0-9]+ generated' "$out" | tail -1 | grep -oE '[0-9]+' || echo 0)
rm -f "$out"
if (( status != 0 )); then
  echo "schemathesis found failures (above)" >&2
  exit 1
fi
if (( generated < 1000 )); then
  echo "schemathesis generated only $generated requests (at least 1,000 wanted)" >&2
  exit 1
fi
echo "schemathesis: $generated generated requests, no failures"
