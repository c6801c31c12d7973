#!/usr/bin/env bash
# Starts the PostgreSQL server the tests use (Debian's postgresql package, installed by
# scripts/install-deps.sh) and makes sure it has the test role; prints its URL for
# OFFLINE_AGENT_TEST_POSTGRES_URL. Idempotent: a running cluster and an existing role are
# kept. Exits non-zero, saying why on stderr, when PostgreSQL is not installed or will not
# start; the PostgreSQL tests then skip and say so.
set -euo pipefail

role=offline_agent_test
password=offline_agent_test

if ! command -v pg_lsclusters >/dev/null; then
    echo "postgres-test: PostgreSQL is not installed (apt-get install postgresql)" >&2
    exit 1
fi
as_postgres() {
    if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else sudo -n -u postgres -- "$@"; fi
}

# The newest cluster; Debian's package creates <major>/main.
read -r version cluster port status _ < <(pg_lsclusters -h | sort -k1,1n | tail -n 1) || true
if [[ -z ${version:-} ]]; then
    version=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
    as_postgres pg_createcluster "$version" main >/dev/null
    read -r version cluster port status _ < <(pg_lsclusters -h | sort -k1,1n | tail -n 1)
fi
if [[ $status != online* ]]; then
    # No systemd in a CI container: start the cluster directly (a bounded wait inside).
    if [[ $(id -u) == 0 ]]; then
        pg_ctlcluster "$version" "$cluster" start >&2
    else
        sudo -n pg_ctlcluster "$version" "$cluster" start >&2
    fi
fi
# Ready within 30 s or give up (pg_isready answers at once either way).
for _ in $(seq 1 60); do
    pg_isready -q -h 127.0.0.1 -p "$port" && break
    sleep 0.5
done
pg_isready -q -h 127.0.0.1 -p "$port" || { echo "postgres-test: PostgreSQL $version/$cluster did not start on port $port" >&2; exit 1; }

# A password role that may create the tests' databases, reached over TCP on loopback
# (Debian's pg_hba.conf allows scram-sha-256 there).
as_postgres psql -qAt -p "$port" -v ON_ERROR_STOP=1 <<SQL >/dev/null
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$role') THEN
        CREATE ROLE $role LOGIN CREATEDB PASSWORD '$password';
    END IF;
END \$\$;
SQL
if ! as_postgres psql -qAt -p "$port" -c "SELECT 1 FROM pg_database WHERE datname = '$role'" | grep -q 1; then
    as_postgres createdb -p "$port" -O "$role" "$role"
fi
echo "postgres://$role:$password@127.0.0.1:$port/$role"
