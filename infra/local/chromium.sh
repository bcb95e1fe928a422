#!/usr/bin/env bash
# Make sure a headless-capable Chromium is installed: the gateway's browser test
# (tests/gateway/test_browser.py) opens an EventSource in a real page. Installs Debian's
# `chromium` package when /usr/bin/chromium is missing. Idempotent.
set -euo pipefail
BIN=${REVENTLESS_CHROMIUM:-/usr/bin/chromium}

[ -x "$BIN" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium.sh: installing chromium from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
    exit 0
fi
echo "chromium.sh: $BIN is missing and cannot be installed here (apt-get install chromium)" >&2
exit 1
