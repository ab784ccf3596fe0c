#!/usr/bin/env bash
# The whole test suite: unit, integration (real PostgreSQL on 127.0.0.1:5432 and RabbitMQ on
# 127.0.0.1:5672) and doc tests. Services must be running; `.ci/run` starts them.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export AMQP_URL="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
cargo test --workspace --all-targets --locked
cargo test --workspace --doc --locked
