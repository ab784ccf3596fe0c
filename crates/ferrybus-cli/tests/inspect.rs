//! Runs the real `ferrybus envelope inspect` binary on the fixtures and on broken input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

/// The path of a fixture envelope.
macro_rules! fixture {
    ($file:literal) => {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/envelopes/",
            $file
        )
    };
}

const F01: &str = fixture!("01-v8.0.10-stj-fault-published-asb.json");
const F03: &str = fixture!("03-v8.0.5-stj-request-accepttype-rabbitmq.json");
const F04: &str = fixture!("04-v8.0.7-stj-publish-rabbitmq.json");
const F08: &str = fixture!("08-v8.4.1-stj-publish-custom-header-decimal-rabbitmq.json");
const F11: &str = fixture!("11-v8-minimal-handwritten-accepted.json");
const F12: &str = fixture!("12-v7.3.1-newtonsoft-publish-empty-guid-decimal-rabbitmq.json");
const F16: &str = fixture!("16-v5.5.1-publish-deep-hierarchy-headers-array-rabbitmq.json");
const F17: &str = fixture!("17-v5.0.0-newtonsoft-response-rabbitmq.json");

/// Runs `ferrybus <args>`, feeding `stdin` (or nothing) to it.
fn ferrybus(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrybus"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ferrybus binary starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// Runs `ferrybus envelope inspect <file>` and returns its parsed output.
fn inspect_file(path: &str) -> Value {
    success(ferrybus(&["envelope", "inspect", path], None))
}

/// Checks a successful run and parses its standard output.
fn success(out: Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(out.stderr.is_empty(), "unexpected stderr: {stderr}");
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON document")
}

/// Feeds `body` on stdin, checks the run failed with status 1, an empty stdout and a single
/// `error: ` line, and returns that line.
fn failure(args: &[&str], body: &[u8]) -> String {
    let out = ferrybus(args, Some(body));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("error: "), "{stderr:?}");
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    stderr.trim_end().to_owned()
}

/// The keys of the top-level object of pretty-printed JSON, in order.
fn top_level_keys(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|line| line.strip_prefix("  \""))
        .filter_map(|rest| rest.split_once("\":").map(|(key, _)| key))
        .collect()
}

#[test]
fn prints_one_object_with_every_key_in_order() {
    let out = ferrybus(&["envelope", "inspect", F11], None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("{\n") && text.ends_with("}\n"), "{text}");
    assert_eq!(
        top_level_keys(&text),
        [
            "message_id",
            "request_id",
            "correlation_id",
            "conversation_id",
            "initiator_id",
            "source_address",
            "destination_address",
            "response_address",
            "fault_address",
            "message_type",
            "sent_time",
            "expiration_time",
            "headers",
            "host",
            "message",
        ]
    );
}

#[test]
fn minimal_handwritten_envelope_11() {
    assert_eq!(
        inspect_file(F11),
        json!({
            "message_id": "181c0000-6393-3630-36a4-08daf4e7c6da",
            "request_id": null,
            "correlation_id": null,
            "conversation_id": null,
            "initiator_id": null,
            "source_address": null,
            "destination_address": null,
            "response_address": null,
            "fault_address": null,
            "message_type": ["urn:message:MassTransitRepro:SampleEvent"],
            "sent_time": null,
            "expiration_time": null,
            "headers": {},
            "host": null,
            "message": {}
        })
    );
}

#[test]
fn custom_header_and_decimal_08() {
    assert_eq!(
        inspect_file(F08),
        json!({
            "message_id": "a88b0000-84d7-1ddb-d46d-08dd9af26165",
            "request_id": null,
            "correlation_id": null,
            "conversation_id": "a88b0000-84d7-1ddb-74fa-08dd9af26170",
            "initiator_id": null,
            "source_address": "rabbitmq://localhost/DESKTOP3VIT6KG_OrdersApi_bus_infoyyrr4hq7s4ptbdq3ih1g88?temporary=true",
            "destination_address": "rabbitmq://localhost/OrderCReted",
            "response_address": null,
            "fault_address": null,
            "message_type": ["urn:message:Contracts.Events:OrderCreated"],
            "sent_time": "2025-05-24T18:39:56.3305069Z",
            "expiration_time": null,
            "headers": {"my-custom-header": "value"},
            "host": {
                "machineName": "DESKTOP-3VIT6KG",
                "processName": "OrdersApi",
                "processId": 35752,
                "assembly": "OrdersApi",
                "assemblyVersion": "1.0.0.0",
                "frameworkVersion": "8.0.16",
                "massTransitVersion": "8.4.1.0",
                "operatingSystemVersion": "Microsoft Windows NT 10.0.26100.0"
            },
            "message": {
                "id": 13,
                "orderId": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
                "createdAt": "2025-05-24T18:39:55.0334654Z",
                "totalAmount": "0"
            }
        })
    );
}

#[test]
fn request_with_accept_type_array_03() {
    let out = inspect_file(F03);
    let bus = "rabbitmq://localhost/masstransit/THINKPAD_MassTransitRpDemoRequest_bus_7o8yyyr88cyx9nznbdp8dqnnbe?temporary=true";
    assert_eq!(out["message_id"], "ec0e0000-873b-00ff-630e-08da71b84291");
    assert_eq!(out["request_id"], "ec0e0000-873b-00ff-f368-08da71b8424e");
    assert_eq!(
        out["conversation_id"],
        "ec0e0000-873b-00ff-fd58-08da71b84298"
    );
    assert_eq!(out["source_address"], bus);
    assert_eq!(out["response_address"], bus);
    assert_eq!(
        out["destination_address"],
        "rabbitmq://localhost/masstransit/orders?bind=true"
    );
    assert_eq!(out["expiration_time"], "2022-07-29T23:16:13.3233807Z");
    assert_eq!(out["sent_time"], "2022-07-29T23:15:43.1091982Z");
    assert_eq!(
        out["headers"],
        json!({"MT-Request-AcceptType": ["urn:message:MassTransit.RequestResponseDemo:IOrderResponse"]})
    );
    assert_eq!(
        out["message_type"],
        json!(["urn:message:MassTransit.RequestResponseDemo:IOrderRequest"])
    );
}

#[test]
fn fault_01() {
    let out = inspect_file(F01);
    assert_eq!(out["message_id"], "101b0000-a566-c025-a8fa-08dafb14324e");
    assert_eq!(out["sent_time"], "2023-01-20T18:28:58.8280058Z");
    assert_eq!(out["expiration_time"], Value::Null);
    assert_eq!(
        out["message_type"],
        json!([
            "urn:message:MassTransit:Fault[[DOMAIN.Messages:AcceptMessage]]",
            "urn:message:MassTransit:Fault"
        ])
    );
    assert_eq!(out["headers"], json!({}));
    assert_eq!(out["host"]["processId"], 0);
    assert_eq!(out["host"]["machineName"], "");
    assert_eq!(
        out["message"]["faultMessageTypes"],
        json!(["urn:message:DOMAIN.Messages:AcceptMessage"])
    );
}

#[test]
fn all_zero_correlation_id_12() {
    let out = inspect_file(F12);
    assert_eq!(
        out["correlation_id"],
        "00000000-0000-0000-0000-000000000000"
    );
    assert_eq!(out["initiator_id"], "14983d63-07ea-4f3e-9a3e-db959428d0e6");
    assert_eq!(out["request_id"], Value::Null);
    assert_eq!(out["response_address"], Value::Null);
    assert_eq!(out["sent_time"], "2025-01-19T23:15:17.6029851Z");
    assert_eq!(
        out["message_type"],
        json!([
            "urn:message:Play.Items.Contracts.Events:ItemCreated",
            "urn:message:Play.Common.Abs.Events:IEvent"
        ])
    );
    assert_eq!(out["message"]["price"], "66.99");
}

#[test]
fn headers_array_and_non_ascii_16() {
    let out = inspect_file(F16);
    assert_eq!(out["headers"], json!({}));
    assert_eq!(out["sent_time"], "2021-12-14T15:08:12.9343701Z");
    assert_eq!(out["message_type"].as_array().unwrap().len(), 6);
    assert_eq!(
        out["message_type"][0],
        "urn:message:PIK.ESB.Messages.Implementation.BOP:IdpTeam"
    );
    assert_eq!(
        out["message_type"][5],
        "urn:message:PIK.ESB.Messages.BOP:IIdpTeam"
    );
    assert_eq!(out["host"]["processName"], "dotnet");
    assert_eq!(out["host"]["massTransitVersion"], "5.5.1.0");
    assert_eq!(out["message"]["companyName"], "ГП-МСК ООО");
}

#[test]
fn response_17() {
    let out = inspect_file(F17);
    assert_eq!(out["message_id"], "00000000-2700-0a00-8b04-08d5b4a2ef65");
    assert_eq!(out["request_id"], "00000000-2700-0a00-e326-08d5b4a2ef63");
    assert_eq!(out["sent_time"], "2018-05-08T05:17:03.6952914Z");
    assert_eq!(
        out["source_address"],
        "rabbitmq://localhost/check_order_queue"
    );
}

#[test]
fn reads_stdin_when_the_file_is_dash_or_absent() {
    let body = std::fs::read(F04).unwrap();
    let from_file = inspect_file(F04);
    assert_eq!(
        from_file["message_id"],
        "7c740000-a5be-c025-8e9a-08dabc788911"
    );
    assert_eq!(from_file["sent_time"], "2022-11-02T02:18:30.8073114Z");
    let dash = success(ferrybus(&["envelope", "inspect", "-"], Some(&body)));
    let absent = success(ferrybus(&["envelope", "inspect"], Some(&body)));
    assert_eq!(dash, from_file);
    assert_eq!(absent, from_file);
}

#[test]
fn reads_pascal_case_with_comments_from_stdin() {
    let body = br#"{
        // written by hand
        "MessageId": "181C0000-6393-3630-36A4-08DAF4E7C6DA",
        "MessageType": ["urn:message:MassTransitRepro:SampleEvent",],
        "SentTime": "2021-12-14T18:08:12.9342242+03:00",
        "Message": {"value": 1},
    }"#;
    let out = success(ferrybus(&["envelope", "inspect"], Some(body)));
    assert_eq!(out["message_id"], "181c0000-6393-3630-36a4-08daf4e7c6da");
    assert_eq!(out["sent_time"], "2021-12-14T15:08:12.9342242Z");
    assert_eq!(out["message"], json!({"value": 1}));
}

#[test]
fn bad_json_fails() {
    let line = failure(&["envelope", "inspect"], b"{not json");
    assert!(line.starts_with("error: body is not valid JSON"), "{line}");
    let line = failure(&["envelope", "inspect", "-"], b"");
    assert!(line.starts_with("error: body is not valid JSON"), "{line}");
    let line = failure(&["envelope", "inspect", "-"], b"[1, 2]");
    assert_eq!(line, "error: body is not a JSON object");
}

#[test]
fn non_guid_id_fails() {
    let line = failure(
        &["envelope", "inspect"],
        br#"{"messageId": "nope", "message": {}}"#,
    );
    assert_eq!(line, r#"error: messageId: "nope" is not a GUID"#);
    let line = failure(
        &["envelope", "inspect"],
        br#"{"message": {}, "correlationId": 42}"#,
    );
    assert_eq!(
        line,
        "error: correlationId: expected a GUID string, found a number"
    );
}

#[test]
fn bad_time_fails() {
    let line = failure(
        &["envelope", "inspect"],
        br#"{"message": {}, "sentTime": "yesterday"}"#,
    );
    assert_eq!(line, r#"error: sentTime: "yesterday" is not a date-time"#);
}

#[test]
fn missing_message_fails() {
    let line = failure(
        &["envelope", "inspect"],
        br#"{"messageId": "181c0000-6393-3630-36a4-08daf4e7c6da"}"#,
    );
    assert!(
        line.starts_with("error: message: missing or null"),
        "{line}"
    );
    let line = failure(&["envelope", "inspect"], br#"{"message": null}"#);
    assert!(
        line.starts_with("error: message: missing or null"),
        "{line}"
    );
}

#[test]
fn missing_file_fails() {
    let path = fixture!("does-not-exist.json");
    let line = failure(&["envelope", "inspect", path], b"");
    assert!(line.starts_with("error: cannot read "), "{line}");
    assert!(line.contains("does-not-exist.json"), "{line}");
}

#[test]
fn usage_errors_exit_with_2() {
    for args in [
        &["envelope", "frobnicate"][..],
        &["envelope", "inspect", "a", "b"][..],
        &[][..],
    ] {
        let out = ferrybus(args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
