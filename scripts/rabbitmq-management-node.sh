#!/usr/bin/env bash
# A throwaway RabbitMQ node with the management plugin, for the tests of `ferrybus topology`
# that read the management API. It runs beside the shared broker (its own node name, ports,
# data directory and Erlang cookie, on loopback) and never touches it.
#
#   scripts/rabbitmq-management-node.sh start DIR AMQP_PORT HTTP_PORT DIST_PORT   # returns once it answers
#   scripts/rabbitmq-management-node.sh stop DIR
set -euo pipefail

command=${1:?start or stop}
dir=${2:?a directory for the node}
node_name() { echo "fbmgmt$(cat "$dir/amqp_port")@localhost"; }

node_env() {
    export HOME="$dir"
    export RABBITMQ_NODENAME
    RABBITMQ_NODENAME=$(node_name)
    export RABBITMQ_MNESIA_BASE="$dir/mnesia"
    export RABBITMQ_LOG_BASE="$dir/log"
    export RABBITMQ_PID_FILE="$dir/node.pid"
    export RABBITMQ_CONFIG_FILE="$dir/rabbitmq"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
    export RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf"
    export RABBITMQ_DIST_PORT
    RABBITMQ_DIST_PORT=$(cat "$dir/dist_port")
    export ERL_EPMD_ADDRESS=127.0.0.1
    export ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

case "$command" in
start)
    amqp_port=${3:?AMQP port}
    http_port=${4:?HTTP port}
    dist_port=${5:?Erlang distribution port}
    command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }
    mkdir -p "$dir/mnesia" "$dir/log"
    echo "$amqp_port" >"$dir/amqp_port"
    echo "$dist_port" >"$dir/dist_port"
    head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/.erlang.cookie"
    chmod 400 "$dir/.erlang.cookie"
    printf 'listeners.tcp.local = 127.0.0.1:%s\nmanagement.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %s\nloopback_users = none\n' \
        "$amqp_port" "$http_port" >"$dir/rabbitmq.conf"
    echo '[].' >"$dir/advanced.config"
    echo '[rabbitmq_management].' >"$dir/enabled_plugins"
    : >"$dir/rabbitmq-env.conf"
    node_env
    setsid /usr/lib/rabbitmq/bin/rabbitmq-server >"$dir/server.out" 2>&1 </dev/null &
    echo $! >"$dir/launcher.pid"
    for _ in $(seq 1 120); do
        if curl -sf -u guest:guest "http://127.0.0.1:$http_port/api/overview" >/dev/null 2>&1; then
            exit 0
        fi
        if ! kill -0 "$(cat "$dir/launcher.pid")" 2>/dev/null; then
            echo "the management node did not start:" >&2
            tail -20 "$dir/server.out" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "the management node did not answer within 60s" >&2
    exit 1
    ;;
stop)
    [ -f "$dir/amqp_port" ] || exit 0
    node_env
    /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RABBITMQ_NODENAME" stop >/dev/null 2>&1 || true
    if [ -f "$dir/launcher.pid" ]; then
        kill -- "-$(cat "$dir/launcher.pid")" 2>/dev/null || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start DIR AMQP_PORT HTTP_PORT DIST_PORT | stop DIR" >&2
    exit 2
    ;;
esac
