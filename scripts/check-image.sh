#!/usr/bin/env bash
# Checks the Dockerfile's runtime stage where no Docker engine runs (none does on our build
# machines): a Debian bookworm root made by debootstrap (minbase, what bookworm-slim is made
# of) with the packages, user, files and environment the runtime stage names, read from the
# Dockerfile; the release build this checkout made put where the Dockerfile's COPY lines put it;
# `cardpool serve --demo` started in it with bubblewrap as the image's user; then /readyz, and
# the demo's pages loading and hydrating in Chromium (tests/site.spec.ts), which needs the
# bundle's hashed names to be found from the installed site.
#
# Usage: scripts/check-image.sh   (after `cargo leptos build --release --precompress --split`;
# the root is kept under target/image-check and made again when the Dockerfile changes)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/lib.sh

for tool in debootstrap:debootstrap bwrap:bubblewrap; do
  command -v "${tool%%:*}" >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${tool#*:}"; }
done

# What the runtime stage (after the last FROM) installs, and its environment.
runtime=$(awk '/^FROM /{stage=""} {stage=stage $0 "\n"} END{printf "%s", stage}' Dockerfile)
grep -q "^FROM debian:bookworm-slim" <<<"$runtime" || { echo "the runtime stage is not debian:bookworm-slim" >&2; exit 1; }
packages=$(grep -o "apt-get install -y --no-install-recommends [a-z0-9 .+-]*" <<<"$runtime" | sed 's/.*--no-install-recommends//')
uid=$(grep -o "useradd [^\\]*--uid [0-9]*" <<<"$runtime" | grep -o "[0-9]*$")
env_lines=$(sed -n '/^ENV /,/[^\\]$/p' <<<"$runtime" | grep -o "CARDPOOL_[A-Z_]*=[^ \\]*")

dir=target/image-check
rootfs=$dir/rootfs
stamp=$(sha256sum Dockerfile | cut -c1-16)
if [[ "$(cat "$dir/stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  say "check-image: debootstrap bookworm (minbase) and$packages"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 \
    || { tail -20 "$dir/debootstrap.log"; exit 1; }
  chroot "$rootfs" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages \
    && groupadd --system --gid $uid cardpool \
    && useradd --system --uid $uid --gid cardpool --create-home --home-dir /var/lib/cardpool --shell /usr/sbin/nologin cardpool" \
    >>"$dir/debootstrap.log" 2>&1 || { tail -20 "$dir/debootstrap.log"; exit 1; }
  echo "$stamp" >"$dir/stamp"
fi

# The Dockerfile's COPY lines, from this checkout's build.
[[ -x target/release/cardpool && -f target/release/hash.txt ]] \
  || { echo "build the release site first: cargo leptos build --release --precompress --split" >&2; exit 1; }
install -m 0755 target/release/cardpool "$rootfs/usr/local/bin/cardpool"
rm -rf "$rootfs/usr/share/cardpool" "$rootfs/var/lib/cardpool/"{cardpool.db*,.cardpool,cardpool-ssh-host-key}
mkdir -p "$rootfs/usr/share/cardpool"
cp -r target/site "$rootfs/usr/share/cardpool/site"
cp target/release/hash.txt "$rootfs/usr/share/cardpool/site/hash.txt"

missing=$(bwrap --bind "$rootfs" / --proc /proc --dev /dev ldd /usr/local/bin/cardpool | grep "not found" || true)
[[ -z "$missing" ]] || { echo "libraries the image lacks:"$'\n'"$missing" >&2; exit 1; }

port=$(free_port)
ssh_port=$(free_port)
args=()
for line in $env_lines; do args+=(--setenv "${line%%=*}" "${line#*=}"); done
say "check-image: cardpool serve --demo in the image's root as uid $uid, port $port"
# bwrap's --uid needs a user namespace, in which the root's files would not be owned as in the
# image; setpriv (util-linux, in every Debian root) drops to the image's user instead.
bwrap --bind "$rootfs" / --proc /proc --dev /dev --tmpfs /tmp --unshare-pid --die-with-parent \
  --chdir /var/lib/cardpool --clearenv "${args[@]}" \
  --setenv HOME /var/lib/cardpool --setenv PATH /usr/local/bin:/usr/bin:/bin \
  --setenv CARDPOOL_ADDR "127.0.0.1:$port" --setenv CARDPOOL_SSH_ADDR "127.0.0.1:$ssh_port" \
  setpriv --reuid="$uid" --regid="$uid" --clear-groups \
  /usr/local/bin/cardpool serve --demo >"$dir/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$dir/serve.log"; echo "the server in the image's root exited" >&2; exit 1; }
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null || { tail -30 "$dir/serve.log"; exit 1; }
(cd end2end && CARDPOOL_E2E_URL="http://127.0.0.1:$port" npx playwright test tests/site.spec.ts --project=desktop) \
  || { tail -30 "$dir/serve.log"; exit 1; }
say "check-image: the runtime stage serves a working demo"
