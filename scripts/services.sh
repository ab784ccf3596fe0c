#!/usr/bin/env bash
# Makes sure PostgreSQL (127.0.0.1:5432, trust auth, database `test`) and RabbitMQ (127.0.0.1:5672,
# guest/guest) run: starts them when they are stopped, installs them with apt-get when absent,
# and waits until both answer. Safe to run again.
set -euo pipefail

log() { printf '[services] %s\n' "$*"; }

apt_install() {
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

wait_for() { # wait_for <what> <seconds> <command...>
  local what=$1 seconds=$2; shift 2
  for _ in $(seq 1 "$seconds"); do
    if "$@" >/dev/null 2>&1; then log "$what is up"; return 0; fi
    sleep 1
  done
  log "$what did not come up in ${seconds}s"; return 1
}

start_postgres() {
  if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then return 0; fi
  command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  local hba="/etc/postgresql/$version/main/pg_hba.conf"
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
}

start_rabbitmq() {
  if rabbitmq-diagnostics -q check_port_connectivity >/dev/null 2>&1; then return 0; fi
  command -v rabbitmq-server >/dev/null 2>&1 || apt_install rabbitmq-server
  rabbitmq-server -detached || true
}

start_postgres
start_rabbitmq
wait_for PostgreSQL 120 pg_isready -h 127.0.0.1 -p 5432 -U postgres
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE test'
wait_for RabbitMQ 180 rabbitmq-diagnostics -q check_port_connectivity

