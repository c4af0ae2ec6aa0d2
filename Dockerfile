# syntax=docker/dockerfile:1
# The Cardpool server as a container image: the cargo-leptos release build, then a slim Debian
# runtime holding only the binary and the site it serves.
#
#   docker build -t cardpool .
#   docker run -p 3000:3000 -v cardpool:/var/lib/cardpool cardpool serve --demo    # one process, SQLite
#   docker compose -f deploy/compose.yaml up                                      # a two-replica cluster
#
# The image serves on 0.0.0.0:3000 (HTTP, the API, agents' WebSocket) and 0.0.0.0:2222 (the SSH
# gateway); it keeps its SQLite file (if used) and the SSH host key in /var/lib/cardpool. Every
# setting can be given as a CARDPOOL_* variable (see cardpool.example.toml) or in a config file
# passed with `--config`.

# --- Build: the toolchain of scripts/bootstrap.sh, pinned the same ----------------------------
FROM rust:1.95-bookworm AS build
# Tailwind v4 and wasm-opt come from npm (package.json); they want Node.js 20.
COPY --from=node:20-bookworm-slim /usr/local/bin/node /usr/local/bin/node
COPY --from=node:20-bookworm-slim /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && rustup target add wasm32-unknown-unknown
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo install cargo-leptos --version 0.3.10 --locked \
 && cargo install wasm-bindgen-cli --version 0.2.130
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo leptos build --release --precompress --split \
 # The bundle's content-hashed names travel with the site (the server reads them from there).
 && cp target/release/hash.txt target/site/hash.txt \
 && cargo build --release --locked -p cardpool-agent --bin cardpool-agent

# --- Runtime ---------------------------------------------------------------------------------
FROM debian:bookworm-slim
# CA certificates: Stripe and outgoing webhooks are HTTPS. Nothing else is linked but glibc.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 cardpool \
 && useradd --system --uid 10001 --gid cardpool --create-home --home-dir /var/lib/cardpool \
      --shell /usr/sbin/nologin cardpool \
 # A folder a volume can hold the SSH host key in, shared by replicas (deploy/compose.yaml).
 && install -d -o cardpool -g cardpool -m 0700 /var/lib/cardpool/ssh
COPY --from=build /src/target/release/cardpool /usr/local/bin/cardpool
COPY --from=build /src/target/site /usr/share/cardpool/site
# The agent binary, for providers who copy it out of the image (it runs on the GPU host, not here):
#   docker run --rm --entrypoint cat cardpool /usr/share/cardpool/cardpool-agent > cardpool-agent
COPY --from=build /src/target/release/cardpool-agent /usr/share/cardpool/cardpool-agent
COPY cardpool.example.toml /usr/share/cardpool/cardpool.example.toml
ENV CARDPOOL_SITE_ROOT=/usr/share/cardpool/site \
    CARDPOOL_ADDR=0.0.0.0:3000 \
    CARDPOOL_SSH_ADDR=0.0.0.0:2222
USER cardpool
WORKDIR /var/lib/cardpool
VOLUME /var/lib/cardpool
EXPOSE 3000 2222
# SIGTERM: stop accepting, drain requests, close live feeds and agent sockets (agents reconnect,
# to another replica if there is one). Keep docker's stop timeout above the 10 s drain.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cardpool"]
CMD ["serve"]
