#!/usr/bin/env bash
# A RabbitMQ cluster of three nodes on this machine, for tests and for trying failover by hand,
# next to (never touching) the broker on 5672: each node has its own name, ports, data
# directory, configuration and (shared) Erlang cookie, and registers with the machine's epmd.
#
#   scripts/rabbitmq-cluster.sh check              exit 0 when the cluster can run here
#   scripts/rabbitmq-cluster.sh start              start three nodes and cluster them
#   scripts/rabbitmq-cluster.sh stop               stop every node, delete the data directory
#   scripts/rabbitmq-cluster.sh status             cluster status (from node 1)
#   scripts/rabbitmq-cluster.sh urls               the nodes' AMQP URLs, comma-separated
#   scripts/rabbitmq-cluster.sh stop-node N        stop node N (1-3), keep its data
#   scripts/rabbitmq-cluster.sh start-node N       start node N again (it rejoins)
#   scripts/rabbitmq-cluster.sh start-tls CERT KEY CA
#                                                  start one more node, `ferrybus-tls`, with
#                                                  only a TLS listener (amqps) on its port
#   scripts/rabbitmq-cluster.sh stop-tls           stop it
#
# Settings (environment): FERRYBUS_CLUSTER_DIR (default /tmp/ferrybus-rabbitmq-cluster),
# FERRYBUS_CLUSTER_PORT (default 5701: nodes on 5701, 5702, 5703; Erlang distribution on
# 25701…), FERRYBUS_TLS_PORT (default 5711). Users: guest/guest (loopback only).
set -euo pipefail

DIR=${FERRYBUS_CLUSTER_DIR:-/tmp/ferrybus-rabbitmq-cluster}
BASE=${FERRYBUS_CLUSTER_PORT:-5701}
TLS_PORT=${FERRYBUS_TLS_PORT:-5711}
RMQ_BIN=${RABBITMQ_BIN:-/usr/lib/rabbitmq/bin}
COOKIE=ferrybus-test-cluster-cookie
NODES=(1 2 3)

log() { printf '[rabbitmq-cluster] %s\n' "$*" >&2; }

name_of() { # name_of <n|tls>
  if [ "$1" = tls ]; then echo "ferrybus-tls@localhost"; else echo "ferrybus-c$1@localhost"; fi
}
port_of() { if [ "$1" = tls ]; then echo "$TLS_PORT"; else echo $((BASE + $1 - 1)); fi; }

# Runs a RabbitMQ command for node $1 with that node's environment.
node_env() {
  local n=$1; shift
  local home="$DIR/node$n" port
  port=$(port_of "$n")
  env HOME="$DIR" \
    RABBITMQ_NODENAME="$(name_of "$n")" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$port" \
    RABBITMQ_DIST_PORT=$((20000 + port)) \
    RABBITMQ_MNESIA_BASE="$home/mnesia" \
    RABBITMQ_LOG_BASE="$home/log" \
    RABBITMQ_PID_FILE="$home/pid" \
    RABBITMQ_CONFIG_FILE="$home/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$home/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$home/enabled_plugins" \
    RABBITMQ_CONF_ENV_FILE="$home/rabbitmq-env.conf" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    ERL_CRASH_DUMP="$DIR/erl_crash.dump" \
    "$@"
}

# rabbitmqctl for node $1; fails at once (without starting Erlang) when nothing was set up.
ctl() {
  local n=$1; shift
  [ -f "$DIR/.erlang.cookie" ] || { log "no cluster set up in $DIR"; return 1; }
  (cd "$DIR" && node_env "$n" "$RMQ_BIN/rabbitmqctl" -n "$(name_of "$n")" "$@")
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

check() {
  [ -x "$RMQ_BIN/rabbitmq-server" ] || { log "no $RMQ_BIN/rabbitmq-server (apt-get install rabbitmq-server)"; return 1; }
  [ -x "$RMQ_BIN/rabbitmqctl" ] || { log "no rabbitmqctl"; return 1; }
  command -v epmd >/dev/null || { log "no epmd"; return 1; }
  return 0
}

write_config() { # write_config <n|tls> [tls options…]
  local n=$1 home="$DIR/node$1"
  mkdir -p "$home/mnesia" "$home/log"
  printf '[].\n' > "$home/enabled_plugins"
  : > "$home/rabbitmq-env.conf"
  printf '[].\n' > "$home/advanced.config"
  {
    echo "loopback_users.guest = true"
    echo "disk_free_limit.absolute = 50MB"
    echo "vm_memory_high_watermark.relative = 0.1"
    echo "log.console = false"
    echo "log.file.level = info"
    if [ "$n" = tls ]; then
      echo "listeners.tcp = none"
      echo "listeners.ssl.default = 127.0.0.1:$(port_of tls)"
      echo "ssl_options.certfile = $2"
      echo "ssl_options.keyfile = $3"
      echo "ssl_options.cacertfile = $4"
      echo "ssl_options.verify = verify_none"
      echo "ssl_options.fail_if_no_peer_cert = false"
    else
      echo "listeners.tcp.default = 127.0.0.1:$(port_of "$n")"
      echo "cluster_partition_handling = pause_minority"
    fi
  } > "$home/rabbitmq.conf"
}

write_cookie() {
  mkdir -p "$DIR"
  if [ ! -f "$DIR/.erlang.cookie" ]; then
    printf '%s' "$COOKIE" > "$DIR/.erlang.cookie"
    chmod 400 "$DIR/.erlang.cookie"
  fi
}

start_one() { # start_one <n|tls>
  local n=$1 port
  port=$(port_of "$n")
  [ -f "$DIR/node$n/rabbitmq.conf" ] || { log "node $n is not set up in $DIR (run start)"; return 1; }
  if ctl "$n" -q status >/dev/null 2>&1; then log "node $(name_of "$n") runs already"; return 0; fi
  port_free "$port" || { log "port $port is taken"; return 1; }
  port_free $((20000 + port)) || { log "port $((20000 + port)) is taken"; return 1; }
  (cd "$DIR" && node_env "$n" "$RMQ_BIN/rabbitmq-server" -detached) >/dev/null 2>&1 \
    || { log "rabbitmq-server failed for $(name_of "$n")"; return 1; }
  for _ in $(seq 1 120); do
    if ctl "$n" -q await_startup >/dev/null 2>&1; then log "$(name_of "$n") is up on 127.0.0.1:$port"; return 0; fi
    sleep 1
  done
  log "$(name_of "$n") did not come up; see $DIR/node$n/log"; return 1
}

stop_one() {
  local n=$1 pidfile="$DIR/node$1/pid" pid=""
  [ -f "$pidfile" ] && pid=$(cat "$pidfile" 2>/dev/null || true)
  if ctl "$n" -q status >/dev/null 2>&1; then
    ctl "$n" -q stop >/dev/null 2>&1 || true
  fi
  # The node did not answer its CLI (or did not stop): end it by its own pid.
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  if [ -n "$pid" ]; then log "$(name_of "$n") stopped"; fi
  rm -f "$pidfile"
}

start() {
  check
  write_cookie
  for n in "${NODES[@]}"; do write_config "$n"; done
  for n in "${NODES[@]}"; do start_one "$n"; done
  for n in 2 3; do
    if ! ctl 1 -q cluster_status 2>/dev/null | grep -q "$(name_of "$n")"; then
      ctl "$n" -q stop_app >/dev/null 2>&1
      ctl "$n" -q reset >/dev/null 2>&1
      ctl "$n" -q join_cluster "$(name_of 1)" >/dev/null 2>&1
      ctl "$n" -q start_app >/dev/null 2>&1
    fi
  done
  ctl 1 -q await_online_nodes 3 >/dev/null
  log "cluster of 3 nodes is up: $(urls)"
}

urls() {
  local out=""
  for n in "${NODES[@]}"; do out="$out${out:+,}amqp://guest:guest@127.0.0.1:$(port_of "$n")/%2f"; done
  echo "$out"
}

stop() {
  for n in "${NODES[@]}" tls; do stop_one "$n"; done
  rm -rf "$DIR"
}

case "${1:-}" in
  check) check ;;
  start) start ;;
  stop) stop ;;
  status) ctl 1 cluster_status ;;
  urls) urls ;;
  stop-node) stop_one "${2:?node 1-3}" ;;
  start-node) start_one "${2:?node 1-3}" ;;
  start-tls)
    check; write_cookie
    write_config tls "${2:?certificate}" "${3:?key}" "${4:?ca}"
    start_one tls ;;
  stop-tls) stop_one tls; rm -rf "$DIR/nodetls" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
