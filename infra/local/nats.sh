#!/usr/bin/env bash
# Make sure a nats-server binary (with JetStream) is installed (used by `make test`).
# The tests start private servers themselves (tests/nats_server.py); this script only
# installs Debian's `nats-server` package when the binary is missing. Idempotent.
set -euo pipefail

if [ -n "${NATS_SERVER_BIN:-}" ] && [ -x "$NATS_SERVER_BIN" ]; then
    exit 0
fi
for candidate in "$(command -v nats-server || true)" /usr/sbin/nats-server /usr/bin/nats-server; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
        exit 0
    fi
done

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "nats.sh: installing nats-server from Debian's packages" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
    exit 0
fi
echo "nats.sh: nats-server is not installed and cannot be installed here" >&2
echo "nats.sh: (apt-get install nats-server, or set NATS_SERVER_BIN); the nats tests skip" >&2
if [ -n "${CI:-}" ]; then
    exit 1
fi
