#!/usr/bin/env bash
# Installs what building and testing Cardpool needs, skipping whatever is already there, so it
# is safe to run again. Only crates.io, npm and Debian packages are used (see TOOLCHAIN notes
# in README). `--test` also installs Chromium and makes sure PostgreSQL is running.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

CARGO_LEPTOS_VERSION=0.3.10
WASM_BINDGEN_VERSION=0.2.130   # must equal the `wasm-bindgen = "=..."` pin in Cargo.toml
SCHEMATHESIS_VERSION=4.32.5

with_test=false
[[ "${1:-}" == "--test" ]] && with_test=true

say() { printf '\033[1;34m==>\033[0m [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
apt_install() {
  say "apt-get install $*"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@"
}

command -v cargo >/dev/null || { echo "Rust (cargo) is required: https://rustup.rs" >&2; exit 1; }
command -v npm >/dev/null || apt_install nodejs npm
# The agent runs renters' commands in bubblewrap sandboxes (prlimit, setpriv, nsenter:
# util-linux), each with a network of its own through slirp4netns, walled off from the host by
# nftables.
command -v bwrap >/dev/null || apt_install bubblewrap
command -v slirp4netns >/dev/null || apt_install slirp4netns
[[ -x /usr/sbin/nft ]] || apt_install nftables
# SSH into rentals: the SFTP server runs inside the sandbox (scp and sftp use it).
[[ -x /usr/lib/openssh/sftp-server ]] || apt_install openssh-sftp-server

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

if ! cargo leptos --version 2>/dev/null | grep -q "$CARGO_LEPTOS_VERSION"; then
  # Its own release profile is fat LTO in one codegen unit, which took ~35 min on 2 cores; a
  # build tool needs none of that, so it is built with a plain optimised profile instead.
  say "cargo install cargo-leptos $CARGO_LEPTOS_VERSION (a one-off)"
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install cargo-leptos --version "$CARGO_LEPTOS_VERSION" --locked
fi

if ! wasm-bindgen --version 2>/dev/null | grep -q "$WASM_BINDGEN_VERSION"; then
  say "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  # Without --locked: its lockfile pins a crate version this registry does not have.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# Tailwind and wasm-opt (binaryen) come from npm; cargo-leptos finds them in node_modules/.bin.
npm_ci() {
  local dir=$1
  if [[ ! -f "$dir/node_modules/.package-lock.json" || "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]]; then
    say "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
npm_ci .

if $with_test; then
  npm_ci end2end
  command -v chromium >/dev/null || apt_install chromium
  # The SSH tests drive Debian's OpenSSH client; their rental serves files with Python, and the
  # gang test's ranks meet through a store written in Python (the sandbox sees /usr only).
  command -v ssh >/dev/null || apt_install openssh-client
  [[ -x /usr/bin/python3 ]] || apt_install python3
  # The gang test lays its fabric with a veth pair (iproute2).
  command -v ip >/dev/null || apt_install iproute2
  # The systemd units in deploy/ are checked with systemd-analyze.
  command -v systemd-analyze >/dev/null || apt_install systemd
  # The API's contract is checked with schemathesis (PyPI), in a virtualenv of its own.
  python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
  if ! target/tools/schemathesis/bin/schemathesis --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    say "pip install schemathesis $SCHEMATHESIS_VERSION"
    python3 -m venv target/tools/schemathesis
    target/tools/schemathesis/bin/pip install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
  fi
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    say "starting PostgreSQL"
    as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
  # NATS with JetStream: the cluster tests' bus (two replicas in one test process).
  command -v nats-server >/dev/null || apt_install nats-server
  if ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
    say "starting NATS (JetStream) on 127.0.0.1:4222"
    mkdir -p target/nats
    nohup nats-server -a 127.0.0.1 -p 4222 -js -sd "$PWD/target/nats" >target/nats/server.log 2>&1 &
    for _ in $(seq 1 30); do (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null && break; sleep 0.5; done
  fi
fi
