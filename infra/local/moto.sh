#!/usr/bin/env bash
# Start a local moto server (SNS, SQS, CloudFormation) as the stand-in for AWS, for the
# demo: `bash infra/local/moto.sh` then
#   make demo DEMO_ARGS="--broker sns+sqs://testing:testing@us-east-1?endpoint=http://127.0.0.1:5000"
# The tests start their own private moto servers (tests/moto_server.py).
# MOTO_PORT (default 5000) picks the port; the server's pid goes to .demo/moto.pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT="${MOTO_PORT:-5000}"
BIN=".venv/bin/moto_server"
if [ ! -x "$BIN" ]; then
    echo "moto.sh: $BIN is missing: run 'make test' or pip install 'moto[server]'" >&2
    exit 1
fi
if curl -fsS "http://127.0.0.1:$PORT/moto-api/" >/dev/null 2>&1; then
    echo "moto.sh: moto already answers on 127.0.0.1:$PORT"
    exit 0
fi
mkdir -p .demo
nohup "$BIN" -H 127.0.0.1 -p "$PORT" >.demo/moto.log 2>&1 &
echo $! >.demo/moto.pid
for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$PORT/moto-api/" >/dev/null 2>&1; then
        echo "moto.sh: moto listening on 127.0.0.1:$PORT (pid $(cat .demo/moto.pid))"
        exit 0
    fi
    sleep 0.1
done
echo "moto.sh: moto did not start (see .demo/moto.log)" >&2
exit 1
