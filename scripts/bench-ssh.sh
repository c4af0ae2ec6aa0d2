#!/usr/bin/env bash
# SSH through Cardpool, measured against a running demo server: `bench-ssh.sh URL SSH_PORT`
# (bench.sh runs it on its demo). Books a demo GPU as the demo renter with a fresh key, then
# prints scp throughput into and out of the rental through the gateway and the agent's
# connection (256 MiB, checked identical) and the time of one `ssh rN true` (login, command,
# exit). Ends the rental again.
set -euo pipefail
base=$1 port=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
curl -fs -c jar -H "Origin: $base" -H 'content-type: application/json' \
  -d '{"email":"renter@demo.cardpool.dev","password":"cardpool-demo"}' "$base/api/v1/auth/sign-in" >/dev/null
ssh-keygen -q -t ed25519 -N "" -C bench -f key
offer=$(curl -fs -b jar "$base/api/v1/offers?location=PL" | json 'str(d["offers"][0]["host_id"]) + "|" + d["offers"][0]["gpu_model"]')
body=$(python3 -c 'import json,sys; h,m=sys.argv[1].split("|"); print(json.dumps({"host_id":int(h),"gpu_model":m,"gpu_count":1,"workload":{"command":"exec sleep 3600","ssh_public_key":open("key.pub").read().strip()}}))' "$offer")
id=$(curl -fs -b jar -H "Origin: $base" -H 'content-type: application/json' -d "$body" "$base/api/v1/rentals" | json 'd["id"]')
for _ in $(seq 1 60); do
  [[ $(curl -fs -b jar "$base/api/v1/rentals/$id" | json 'd["rental"]["state"]') == running ]] && break
  sleep 0.5
done
options=(-i key -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR)
head -c $((256 << 20)) /dev/urandom > data
t0=$(date +%s.%N)
scp "${options[@]}" -P "$port" data "r$id@127.0.0.1:/workspace/data"
t1=$(date +%s.%N)
scp "${options[@]}" -P "$port" "r$id@127.0.0.1:/workspace/data" back
t2=$(date +%s.%N)
cmp -s data back || { echo "the file came back different" >&2; exit 1; }
for _ in $(seq 1 10); do ssh "${options[@]}" -p "$port" "r$id@127.0.0.1" true; done
t3=$(date +%s.%N)
python3 -c 'import sys; a,b,c,d=map(float,sys.argv[1:]); print(f"scp 256 MiB into a rental {256/(b-a):.0f} MiB/s, out of it {256/(c-b):.0f} MiB/s; ssh rN true {(d-c)*100:.0f} ms")' "$t0" "$t1" "$t2" "$t3"
curl -fs -b jar -H "Origin: $base" -X POST "$base/api/v1/rentals/$id/stop" >/dev/null
