#!/usr/bin/env bash
# Exchanges the test suite declared and left on the shared broker, removed after the suite.
#
# Tests use unique queues, but MassTransit's topology names an exchange after each message type
# (`Bookstore.Contracts:OrderPlaced`, `MassTransit:Fault`, `MassTransit:Fault--X:Job--`), so tests
# running at the same time share them and none of them can delete one without racing the others.
# `scripts/test.sh` records the broker's exchanges before the suite (`snapshot FILE`) and, when the
# suite ends, deletes those that were not there before (`remove FILE`) and that nothing uses any
# more: `if_unused`, so an exchange still bound to a queue (a service started meanwhile on the same
# broker) stays. Deleting an exchange also removes the bindings to it, which frees the exchanges
# bound to it (`MassTransit:Fault--X:Job--` → `MassTransit:Fault`), so it repeats while it deletes
# something.
#
# Needs `rabbitmqctl` for the broker on this machine (the one `scripts/services.sh` starts) and
# `AMQP_URL` pointing at its default vhost `/`; otherwise it says so and leaves everything as it is.
set -uo pipefail

exchanges() {
  { rabbitmqctl -q list_exchanges name 2>/dev/null || true; } | { grep -v -e '^name$' -e '^amq\.' -e '^$' || true; } | sort -u
}

# Deletes exchange $1 unless something is bound from it; prints `ok` when it did (else
# `{error,in_use}` or `{error,not_found}`).
delete_if_unused() {
  local name=${1//\\/\\\\}
  name=${name//\"/\\\"}
  rabbitmqctl -q eval "rabbit_exchange:delete(rabbit_misc:r(<<\"/\">>, exchange, <<\"${name}\"/utf8>>), true, <<\"ferrybus-tests\">>)." 2>/dev/null
}

case "${1:-}" in
  snapshot)
    case "${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}" in
      amqp://*@127.0.0.1:5672/%2f | amqp://*@localhost:5672/%2f) ;;
      *)
        echo "broker-leftovers: AMQP_URL is not this machine's default vhost; exchanges the tests declare will stay" >&2
        : > "$2.unavailable"
        exit 0
        ;;
    esac
    if ! command -v rabbitmqctl >/dev/null || ! rabbitmqctl -q status >/dev/null 2>&1; then
      echo "broker-leftovers: no rabbitmqctl for this broker; exchanges the tests declare will stay" >&2
      : > "$2.unavailable"
      exit 0
    fi
    exchanges > "$2"
    ;;
  remove)
    [ -e "$2.unavailable" ] && exit 0
    [ -e "$2" ] || exit 0
    removed=0
    while :; do
      deleted=0
      while IFS= read -r name; do
        if [ "$(delete_if_unused "$name")" = ok ]; then
          deleted=$((deleted + 1))
        fi
      done < <(comm -13 "$2" <(exchanges))
      removed=$((removed + deleted))
      [ "$deleted" -gt 0 ] || break
    done
    left=$(comm -13 "$2" <(exchanges) | wc -l)
    echo "broker-leftovers: removed $removed exchange(s) the tests declared; $left still in use stay"
    ;;
  *)
    echo "usage: $0 snapshot FILE | remove FILE" >&2
    exit 2
    ;;
esac
