#!/usr/bin/env bash
# A throwaway PostgreSQL server that accepts TLS connections only, for the TLS tests, beside
# (never touching) the shared server on 5432. It runs as the `postgres` user (PostgreSQL refuses
# root) from its own data directory, listens on localhost:<port> only, trusts user `postgres`
# over TLS (`hostssl … trust`) and rejects everything else.
#
#   scripts/postgres-tls.sh check                    exit 0 when it can run here
#   scripts/postgres-tls.sh start DIR PORT CERT KEY  initdb in DIR (created), start it
#   scripts/postgres-tls.sh stop DIR                 stop it and delete DIR
#
# PG_BIN overrides the binaries' directory (default: the newest /usr/lib/postgresql/*/bin).
set -euo pipefail

log() { printf '[postgres-tls] %s\n' "$*" >&2; }

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

check() {
  [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ] \
    || { log "no initdb/pg_ctl (apt-get install postgresql)"; return 1; }
  if [ "$(id -u)" = 0 ]; then id postgres >/dev/null 2>&1 || { log "no postgres user"; return 1; }; fi
  return 0
}

start() {
  local dir=$1 port=$2 cert=$3 key=$4
  check
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_postgres "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; return 1; }
  cp "$cert" "$dir/data/server.crt"
  cp "$key" "$dir/data/server.key"
  [ "$(id -u)" = 0 ] && chown postgres "$dir/data/server.crt" "$dir/data/server.key"
  chmod 600 "$dir/data/server.key"
  cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = 'localhost'
port = $port
unix_socket_directories = '$dir'
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
max_connections = 40
shared_buffers = 16MB
fsync = off
CONF
  cat > "$dir/data/pg_hba.conf" <<HBA
local   all all          trust
hostssl all all 127.0.0.1/32 trust
hostssl all all ::1/128      trust
host    all all 127.0.0.1/32 reject
host    all all ::1/128      reject
HBA
  as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
    || { cat "$dir/server.log" >&2; return 1; }
  log "PostgreSQL (TLS only) on localhost:$port, data in $dir"
}

stop() {
  local dir=$1
  if [ -d "$dir/data" ]; then
    as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  check) check ;;
  start) start "${2:?dir}" "${3:?port}" "${4:?certificate}" "${5:?key}" ;;
  stop) stop "${2:?dir}" ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
