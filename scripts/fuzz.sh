#!/usr/bin/env bash
# Fuzzes what strangers send the server (an agent's messages, Stripe's webhook deliveries,
# offer-search query strings) with cargo-fuzz, each target for FUZZ_SECONDS (default 120).
# New inputs that reach new code are added to fuzz/corpus/<target>/ (commit them: the test
# command replays the corpora); a crash is saved under fuzz/artifacts/<target>/ and stops the
# run. Needs the nightly toolchain (rustup) and cargo-fuzz (installed here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
seconds=${FUZZ_SECONDS:-120}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(agent_message webhook offer_query)
for target in "${targets[@]}"; do
  echo "==> fuzzing $target for ${seconds}s"
  (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -max_len=65536)
done
