#!/usr/bin/env bash
# Make sure tmux is installed (used by `make test`): tests/cli/test_watch.py drives
# `reventless status --watch` in a real terminal, a detached tmux session on a private
# socket. Installs Debian's `tmux` package when the binary is missing. Idempotent.
set -euo pipefail

if command -v tmux >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "tmux.sh: installing tmux from Debian's packages" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
    exit 0
fi
echo "tmux.sh: tmux is not installed and cannot be installed here" >&2
echo "tmux.sh: (apt-get install tmux); the terminal test of reventless status --watch skips" >&2
if [ -n "${CI:-}" ]; then
    exit 1
fi
