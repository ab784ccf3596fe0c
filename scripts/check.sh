#!/usr/bin/env bash
# What we say we keep, checked without services: formatting, clippy with warnings denied, rustdoc
# with warnings denied, each facade feature building on its own, a consumer-only build free of
# the add-ons, no import cycles in the core and storage crates, and the shape of the core and
# the docs. `.ci/run` runs it before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "clippy, warnings denied"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "rustdoc, warnings denied"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "each facade feature on its own"
for feature in rabbitmq sea-orm derive otel saga batch resilience telemetry; do
    echo "ferrybus --no-default-features --features $feature"
    cargo check -p ferrybus --no-default-features --features "$feature" --locked --quiet
done
cargo check -p ferrybus --no-default-features --locked --quiet
cargo check -p ferrybus-rabbitmq --no-default-features --locked --quiet

step "a consumer-only service compiles no add-on"
tree="$(cargo tree -p ferrybus --no-default-features --features rabbitmq,derive -e normal --prefix none --locked)"
if grep -E '^(opentelemetry|ferrybus-(saga|batch|resilience|otel|sea-orm|telemetry)) ' <<<"$tree"; then
    echo "the crates above are in the dependency tree of features rabbitmq + derive" >&2
    exit 1
fi

step "no import cycles in the core and the storage crate"
python3 scripts/module-cycles.py crates/ferrybus-core crates/ferrybus-sea-orm

step "the core stays a core"
lines="$(find crates/ferrybus-core/src -name '*.rs' -print0 | xargs -0 cat | wc -l)"
echo "crates/ferrybus-core/src: $lines lines"
if ((lines > 10000)); then
    echo "more than 10,000 lines: move what is not core into an add-on crate" >&2
    exit 1
fi
root="$(python3 - <<'PY'
import re
text = open("crates/ferrybus-core/src/lib.rs").read()
names = set(re.findall(r"^pub mod (\w+);", text, re.M))
for body in re.findall(r"^pub use ([^;]+);", text, re.M | re.S):
    if " as " in body and "{" not in body:
        names.add(body.split(" as ")[-1].strip())
    elif "{" in body:
        names.update(n.strip().split("::")[-1] for n in body.split("{", 1)[1].rstrip("}").split(",") if n.strip())
    else:
        names.add(body.split("::")[-1].strip())
print(len(names))
PY
)"
echo "ferrybus_core root: $root names"
if ((root > 35)); then
    echo "more than 35 names at the root of ferrybus_core" >&2
    exit 1
fi

step "docs: every Rust snippet compiled, the benchmark doc short"
if grep -nE '^```(rust,)?ignore' README.md docs/*.md; then
    echo "an ignored code block: make it compile (no_run is fine)" >&2
    exit 1
fi
bench_lines="$(wc -l <docs/benchmarks.md)"
if ((bench_lines > 200)); then
    echo "docs/benchmarks.md has $bench_lines lines (at most 200; history lives in git)" >&2
    exit 1
fi
echo ok
