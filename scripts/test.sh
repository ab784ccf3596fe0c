#!/usr/bin/env bash
# The whole test suite: unit, integration (real PostgreSQL on 127.0.0.1:5432 and RabbitMQ on
# 127.0.0.1:5672) and doc tests, then a smoke run of the benchmarks so they never rot (it checks
# that every message was processed; it asserts no timings). Services must be running:
# `scripts/services.sh` starts them.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
python3 scripts/check-msrv.py
# Exchanges named after message types are shared by tests running at once; the ones the suite
# declared are removed when it ends, however it ends (scripts/broker-leftovers.sh).
leftovers="$(mktemp -t ferrybus-exchanges.XXXXXX)"
scripts/broker-leftovers.sh snapshot "$leftovers"
trap 'scripts/broker-leftovers.sh remove "$leftovers"; rm -f "$leftovers" "$leftovers.unavailable"' EXIT
cargo test --workspace --all-targets --locked
cargo test --workspace --doc --locked
cargo run --locked -p ferrybus-bench -- --smoke --output target/bench-results/smoke.json
