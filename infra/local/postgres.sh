#!/usr/bin/env bash
# Make sure a local PostgreSQL answers on 127.0.0.1:5432 (used by `make test`).
# On this machine kind PostgreSQL comes from Debian's packages; if it is not installed,
# install it, then start the cluster when it is down. Idempotent.
set -euo pipefail
HOST=${PGHOST:-127.0.0.1}
PORT=${PGPORT:-5432}

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "postgres.sh: installing PostgreSQL from Debian's packages" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "postgres.sh: PostgreSQL is not installed and cannot be installed here" >&2
        exit 1
    fi
fi

if pg_isready -q -h "$HOST" -p "$PORT"; then
    exit 0
fi
version=$(ls /etc/postgresql | sort -V | tail -1)
echo "postgres.sh: starting PostgreSQL $version" >&2
pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
for _ in $(seq 1 30); do
    pg_isready -q -h "$HOST" -p "$PORT" && exit 0
    sleep 1
done
echo "postgres.sh: PostgreSQL did not come up on $HOST:$PORT" >&2
exit 1
