#!/usr/bin/env bash
# Instructions the billing service executes per order, counted with callgrind (deterministic, unlike
# wall-clock figures on a shared host).
#
#   scripts/bench-instructions.sh [path/to/ferrybus-bench]
#
# Without an argument it builds this checkout's bench (`cargo build --release -p ferrybus-bench`,
# honouring CARGO_TARGET_DIR) and measures that. It runs the billing scenario (scenario 6) with one
# side only, under `valgrind --tool=callgrind`, twice: SMALL_ORDERS (600) and LARGE_ORDERS (2400)
# orders. Everything that does not grow with the orders (start-up, connections, schema set-up, the
# report) is the same in both runs, so
#
#   instructions per order = (total(LARGE) - total(SMALL)) / (LARGE - SMALL)
#
# The total is every instruction of the bench process (all threads): the service's work per order plus
# the bench's own per-order share (building and pre-filling the backlog, the 50 ms progress polls).
# Counts repeat to within about 1 % (the number of 50 ms polls follows the run's duration). Prints the figure alone on stdout; details go to stderr.
#
# Environment: SIDE=ferrybus (default) or twin (the hand-written lapin + tokio-postgres twin);
# SMALL_ORDERS, LARGE_ORDERS; AMQP_URL, DATABASE_URL (the bench's defaults otherwise: local RabbitMQ
# guest/guest and postgres://postgres@127.0.0.1:5432/test); KEEP=1 keeps the callgrind files.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
side=${SIDE:-ferrybus}
small=${SMALL_ORDERS:-600}
large=${LARGE_ORDERS:-2400}

log() { printf '[bench-instructions] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install valgrind)"
[ "$large" -gt "$small" ] || die "LARGE_ORDERS ($large) must be larger than SMALL_ORDERS ($small)"
case $side in ferrybus|twin) ;; *) die "SIDE must be ferrybus or twin, not '$side'" ;; esac

if [ $# -ge 1 ]; then
  bin=$(realpath "$1")
else
  log "building $root (cargo build --release -p ferrybus-bench)"
  (cd "$root" && cargo build --release -p ferrybus-bench >&2)
  bin=$(realpath "${CARGO_TARGET_DIR:-$root/target}/release/ferrybus-bench")
fi
[ -x "$bin" ] || die "no executable at $bin"

# The bench records `git rev-parse HEAD` of its working directory in its report: run it in the
# checkout the binary was built from, when the binary lies inside one.
workdir=$(git -C "$(dirname "$bin")" rev-parse --show-toplevel 2>/dev/null || echo "$root")
commit=$(git -C "$workdir" rev-parse --short HEAD 2>/dev/null || echo unknown)

# Local services: start them when the default addresses do not answer and no URL was given.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ -z "${AMQP_URL:-}${DATABASE_URL:-}" ] && ! { port_open 5432 && port_open 5672; }; then
  log "starting PostgreSQL and RabbitMQ (scripts/services.sh)"
  "$here/services.sh" >&2
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/bench-instructions.XXXXXX")
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$out"' EXIT; fi

# Runs the billing scenario for $1 orders under callgrind; prints the process's instruction total.
count() {
  local n=$1
  log "$side side, $n orders under callgrind (a few minutes)"
  if ! (cd "$workdir" && valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.$n" \
      "$bin" --scenarios billing --billing-sides "$side" --rounds 1 --billing-orders "$n" \
      --output "$out/report.$n.json" >"$out/stdout.$n" 2>"$out/stderr.$n"); then
    tail -n 20 "$out/stderr.$n" >&2
    die "the run of $n orders failed (orders missing or the run timed out under valgrind); see above"
  fi
  grep -h "orders in" "$out/stderr.$n" | sed 's/^ */   /' >&2 || true
  local total
  total=$(awk '/^(totals|summary):/ { print $2; exit }' "$out/callgrind.$n")
  [ -n "$total" ] || die "no instruction total in $out/callgrind.$n"
  echo "$total"
}

total_small=$(count "$small")
total_large=$(count "$large")
per_order=$(( (total_large - total_small) / (large - small) ))

log "binary $bin (checkout $workdir, commit $commit), side $side"
log "total($large) = $total_large, total($small) = $total_small instructions"
log "per order: ($total_large - $total_small) / $((large - small)) = $per_order" \
  "($(awk -v n="$per_order" 'BEGIN { printf "%.3f", n / 1e6 }') M)"
[ -z "${KEEP:-}" ] || log "callgrind files kept in $out"
echo "$per_order"
