//! Fault stack traces: the same text whether or not `RUST_BACKTRACE` is set, no absolute paths
//! of the build machine, at most 2048 characters (as MassTransit's `ExceptionUtil` cuts them).
//! One test in its own binary, since it changes the process environment.

use ferrybus_core::{fault::ExceptionInfo, ConsumeError};

#[derive(Debug, thiserror::Error)]
#[error("invoice declined")]
struct InvoiceDeclined;

#[inline(never)]
fn fail() -> Result<(), ConsumeError> {
    Err(InvoiceDeclined)?
}

#[inline(never)]
fn deep(n: u32) -> Result<(), ConsumeError> {
    if n == 0 {
        fail()
    } else {
        let result = deep(n - 1);
        std::hint::black_box(&result);
        result
    }
}

#[test]
fn stack_traces_do_not_depend_on_the_environment() {
    let mut traces = Vec::new();
    for setting in [None, Some("0"), Some("1"), Some("full")] {
        match setting {
            None => std::env::remove_var("RUST_BACKTRACE"),
            Some(value) => std::env::set_var("RUST_BACKTRACE", value),
        }
        let error = fail().unwrap_err();
        traces.push(error.stack_trace());
    }
    assert!(traces.iter().all(|t| *t == traces[0]), "{traces:#?}");
    let trace = &traces[0];
    assert!(
        trace.contains("at stack_trace::fail in tests/stack_trace.rs:line 13"),
        "{trace}"
    );
    assert!(!trace.contains(env!("CARGO_MANIFEST_DIR")), "{trace}");
    for line in trace.lines() {
        assert!(line.starts_with("   at "), "{line}");
        assert!(!line.contains(" in /"), "absolute path in {line}");
        assert!(
            !line.contains(" at std::") && !line.contains(" at tokio::"),
            "{line}"
        );
    }

    let error = deep(200).unwrap_err();
    let long = error.stack_trace();
    assert_eq!(long.chars().count(), 2048, "cut as MassTransit cuts it");
    let info = ExceptionInfo::from_error(&error, "InvoiceConsumer");
    assert_eq!(info.exception_type, "stack_trace::InvoiceDeclined");
    assert_eq!(info.stack_trace.as_deref(), Some(long.as_str()));
}
