//! Running the real `ferrybus` binary against the real services.

#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Output, Stdio};

use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::BasicProperties;
use serde_json::Value;

/// Runs `ferrybus <args>` with the tests' broker and database, and no `FERRYBUS_*` settings
/// from the environment.
pub fn ferrybus(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrybus"));
    command
        .args(args)
        .env("AMQP_URL", ferrybus_testing::amqp_url())
        .env("DATABASE_URL", ferrybus_testing::database_url())
        .stdin(Stdio::null());
    for name in [
        "FERRYBUS_SCHEMA",
        "FERRYBUS_NAMING",
        "FERRYBUS_INBOX_TABLE",
        "FERRYBUS_OUTBOX_STATE_TABLE",
        "FERRYBUS_OUTBOX_MESSAGE_TABLE",
        "RABBITMQ_MANAGEMENT_URL",
    ] {
        command.env_remove(name);
    }
    command.output().expect("the ferrybus binary runs")
}

/// Like [`ferrybus`], in a blocking task (for async tests).
pub async fn run(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ferrybus(&args)
    })
    .await
    .unwrap()
}

/// Checks a successful run (status 0, nothing on stderr) and returns its standard output.
pub fn success(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {stderr}\nstdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.is_empty(), "unexpected stderr: {stderr}");
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

/// Checks a failed run: status `code` and exactly one `error: ` line on stderr, which it returns.
pub fn failure(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "stderr: {stderr}\nstdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.starts_with("error: "), "{stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    stderr.trim_end().to_owned()
}

/// The JSON lines of `text`.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// A string header.
pub fn s(text: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(text))
}

/// A MassTransit body for message `id` of type `urn:message:<message_type>`.
pub fn envelope(id: &str, message_type: &str, message: Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "messageId": id,
        "correlationId": id,
        "conversationId": id,
        "messageType": [format!("urn:message:{message_type}")],
        "sentTime": "2025-05-24T18:00:00Z",
        "headers": {"Tenant": "acme"},
        "message": message,
    }))
    .unwrap()
}

/// The properties of a message MassTransit moved to `<input>_error` after `exception`.
pub fn faulted_properties(
    id: &str,
    input_address: &str,
    exception_type: &str,
    exception: &str,
    faulted_at: &str,
) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (k, v) in [
        ("Tenant", s("acme")),
        ("MT-Reason", s("fault")),
        ("MT-Fault-ExceptionType", s(exception_type)),
        ("MT-Fault-Message", s(exception)),
        (
            "MT-Fault-StackTrace",
            s("at Billing.InvoiceConsumer.Consume()\n   at MassTransit.Pipe"),
        ),
        ("MT-Fault-Timestamp", s(faulted_at)),
        ("MT-Fault-InputAddress", s(input_address)),
        ("MT-Fault-ConsumerType", s("Billing.InvoiceConsumer")),
        ("MT-Fault-MessageType", s("Bookstore.Contracts.OrderPlaced")),
        ("MT-Fault-RetryCount", AMQPValue::LongInt(2)),
        ("MT-Host-MachineName", s("billing-7d9f")),
        ("MT-Host-ProcessName", s("Billing.Api")),
    ] {
        headers.insert(k.into(), v);
    }
    ferrybus_testing::mt_properties(id)
        .with_correlation_id(id.into())
        .with_headers(headers)
}
