#!/usr/bin/env bash
# Make sure Java 17 (Spark 4.0's runtime) and the PostgreSQL JDBC driver (Spark reads
# PostgreSQL over JDBC) are installed; both come from Debian's packages. Idempotent.
set -euo pipefail
JAR=${REVENTLESS_JDBC_JAR:-/usr/share/java/postgresql.jar}

missing=()
if ! command -v java >/dev/null 2>&1; then
    missing+=(openjdk-17-jre-headless)
fi
if [ ! -f "$JAR" ]; then
    missing+=(libpostgresql-jdbc-java)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "java.sh: installing ${missing[*]} from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    echo "java.sh: ${missing[*]} missing and cannot be installed here" >&2
    exit 1
fi
