#!/usr/bin/env bash
# Install the AsyncAPI parser (@asyncapi/parser from the npm registry) that the tests in
# tests/docs/ validate generated AsyncAPI documents with, into .reventless/node/
# (git-ignored), with this machine's node and npm. Idempotent: does nothing when the
# pinned version is there already. Needs node >= 18.
#   bash infra/local/asyncapi.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION="${ASYNCAPI_PARSER_VERSION:-3.6.6}"
DIR=".reventless/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "asyncapi.sh: node and npm are missing (apt-get install nodejs npm)" >&2
    exit 1
fi
MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$MAJOR" -lt 18 ]; then
    echo "asyncapi.sh: node $(node --version) is too old for @asyncapi/parser (need >= 18)" >&2
    exit 1
fi
PKG="$DIR/node_modules/@asyncapi/parser/package.json"
if [ -f "$PKG" ] && [ "$(node -p "require('./$PKG').version")" = "$VERSION" ]; then
    exit 0
fi
mkdir -p "$DIR"
[ -f "$DIR/package.json" ] || echo '{"private": true}' >"$DIR/package.json"
echo "asyncapi.sh: installing @asyncapi/parser@$VERSION into $DIR" >&2
npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error \
    "@asyncapi/parser@$VERSION" >&2
echo "asyncapi.sh: @asyncapi/parser $VERSION ready in $DIR"
