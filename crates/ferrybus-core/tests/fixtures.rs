//! One test per real MassTransit envelope in `fixtures/envelopes/` (see its README.md), plus
//! round-trip and alternative-syntax checks.

use chrono::{DateTime, Utc};
use ferrybus_core::envelope::HostInfo;
use ferrybus_core::Envelope;
use serde_json::{json, Map, Value};
use uuid::Uuid;

const F01: &[u8] =
    include_bytes!("../../../fixtures/envelopes/01-v8.0.10-stj-fault-published-asb.json");
const F03: &[u8] =
    include_bytes!("../../../fixtures/envelopes/03-v8.0.5-stj-request-accepttype-rabbitmq.json");
const F04: &[u8] =
    include_bytes!("../../../fixtures/envelopes/04-v8.0.7-stj-publish-rabbitmq.json");
const F06: &[u8] =
    include_bytes!("../../../fixtures/envelopes/06-v8.2.1-stj-send-correlationid-rabbitmq.json");
const F08: &[u8] = include_bytes!(
    "../../../fixtures/envelopes/08-v8.4.1-stj-publish-custom-header-decimal-rabbitmq.json"
);
const F11: &[u8] =
    include_bytes!("../../../fixtures/envelopes/11-v8-minimal-handwritten-accepted.json");
const F12: &[u8] = include_bytes!(
    "../../../fixtures/envelopes/12-v7.3.1-newtonsoft-publish-empty-guid-decimal-rabbitmq.json"
);
const F16: &[u8] = include_bytes!(
    "../../../fixtures/envelopes/16-v5.5.1-publish-deep-hierarchy-headers-array-rabbitmq.json"
);
const F17: &[u8] =
    include_bytes!("../../../fixtures/envelopes/17-v5.0.0-newtonsoft-response-rabbitmq.json");

/// Every fixture, by number.
const ALL: [(&str, &[u8]); 9] = [
    ("01", F01),
    ("03", F03),
    ("04", F04),
    ("06", F06),
    ("08", F08),
    ("11", F11),
    ("12", F12),
    ("16", F16),
    ("17", F17),
];

/// The keys MassTransit v8 writes, in its order.
const V8_KEYS: [&str; 15] = [
    "messageId",
    "requestId",
    "correlationId",
    "conversationId",
    "initiatorId",
    "sourceAddress",
    "destinationAddress",
    "responseAddress",
    "faultAddress",
    "messageType",
    "message",
    "expirationTime",
    "sentTime",
    "headers",
    "host",
];

/// Parses a fixture, failing the test with the envelope error.
fn parse(body: &[u8]) -> Envelope {
    Envelope::from_slice(body).unwrap_or_else(|e| panic!("fixture does not parse: {e}"))
}

/// An expected id.
fn id(text: &str) -> Option<Uuid> {
    Some(Uuid::parse_str(text).unwrap())
}

/// An expected instant.
fn time(text: &str) -> Option<DateTime<Utc>> {
    Some(text.parse::<DateTime<Utc>>().unwrap())
}

/// An expected string.
fn s(text: &str) -> Option<String> {
    Some(text.to_owned())
}

/// An expected message type list.
fn types(urns: &[&str]) -> Vec<String> {
    urns.iter().map(|&u| u.to_owned()).collect()
}

/// An expected host, every field set, in MassTransit's field order.
fn host(fields: [&str; 8]) -> Option<std::sync::Arc<HostInfo>> {
    let [machine, process, pid, assembly, assembly_version, framework, mass_transit, os] = fields;
    Some(std::sync::Arc::new(HostInfo {
        machine_name: s(machine),
        process_name: s(process),
        process_id: Some(pid.parse().unwrap()),
        assembly: s(assembly),
        assembly_version: s(assembly_version),
        framework_version: s(framework),
        mass_transit_version: s(mass_transit),
        operating_system_version: s(os),
    }))
}

#[test]
fn fixture_01_v8_fault_published_asb() {
    let e = parse(F01);
    assert_eq!(e.message_id, id("101b0000-a566-c025-a8fa-08dafb14324e"));
    assert_eq!(e.request_id, None);
    assert_eq!(e.correlation_id, None);
    assert_eq!(
        e.conversation_id,
        id("101b0000-a566-c025-ac6b-08dafb143207")
    );
    assert_eq!(e.initiator_id, None);
    assert_eq!(
        e.source_address,
        s("sb://dvbis2804.servicebus.windows.net/accept")
    );
    assert_eq!(
        e.destination_address,
        s("sb://dvbis2804.servicebus.windows.net/MassTransit/Fault--DOMAIN.Messages/AcceptMessage--?type=topic")
    );
    assert_eq!(e.response_address, None);
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&[
            "urn:message:MassTransit:Fault[[DOMAIN.Messages:AcceptMessage]]",
            "urn:message:MassTransit:Fault",
        ])
    );
    assert_eq!(e.expiration_time, None);
    assert_eq!(e.sent_time, time("2023-01-20T18:28:58.8280058Z"));
    assert!(e.headers.is_empty());
    // The author blanked the outer host (README: the missing `processId` was replaced with 0).
    assert_eq!(e.host, host(["", "", "0", "", "", "", "", ""]));

    let m = &e.message;
    assert_eq!(m["faultId"], "101b0000-a566-c025-9d4d-08dafb14324e");
    assert_eq!(
        m["faultedMessageId"],
        "101b0000-a566-c025-a81b-08dafb143207"
    );
    assert_eq!(m["timestamp"], "2023-01-20T18:28:58.8277047Z");
    assert_eq!(
        m["faultMessageTypes"],
        json!(["urn:message:DOMAIN.Messages:AcceptMessage"])
    );
    let exceptions = m["exceptions"].as_array().unwrap();
    assert_eq!(exceptions.len(), 1);
    assert_eq!(
        exceptions[0]["exceptionType"],
        "System.ServiceModel.FaultException<Microsoft.Xrm.Sdk.OrganizationServiceFault>"
    );
    assert_eq!(
        exceptions[0]["message"],
        "Incorrect attribute value type System.String"
    );
    assert_eq!(exceptions[0]["innerException"], Value::Null);
    assert_eq!(exceptions[0]["data"], Value::Null);
    let stack_trace = exceptions[0]["stackTrace"].as_str().unwrap();
    assert!(stack_trace.starts_with("   at Microsoft.PowerPlatform.Dataverse.Client.ServiceClient.CreateAsync(Entity entity, CancellationToken cancellationToken)\r\n"));
    assert!(stack_trace.contains(r"C:\Users\VipulKulkarni\Downloads"));
    assert_eq!(m["host"]["machineName"], "PC-H38X2B3");
    assert_eq!(m["host"]["processId"], 6928);
    assert_eq!(
        m["message"]["attributeCollection"]["numberofchildren**String"],
        "10"
    );
    assert_eq!(m["message"]["clientRequest"]["postalCode"], "string");
}

#[test]
fn fixture_03_v8_request_accept_type_rabbitmq() {
    let e = parse(F03);
    let bus = "rabbitmq://localhost/masstransit/THINKPAD_MassTransitRpDemoRequest_bus_7o8yyyr88cyx9nznbdp8dqnnbe?temporary=true";
    assert_eq!(e.message_id, id("ec0e0000-873b-00ff-630e-08da71b84291"));
    assert_eq!(e.request_id, id("ec0e0000-873b-00ff-f368-08da71b8424e"));
    assert_eq!(e.correlation_id, None);
    assert_eq!(
        e.conversation_id,
        id("ec0e0000-873b-00ff-fd58-08da71b84298")
    );
    assert_eq!(e.initiator_id, None);
    assert_eq!(e.source_address, s(bus));
    assert_eq!(
        e.destination_address,
        s("rabbitmq://localhost/masstransit/orders?bind=true")
    );
    assert_eq!(e.response_address, s(bus));
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&["urn:message:MassTransit.RequestResponseDemo:IOrderRequest"])
    );
    assert_eq!(e.expiration_time, time("2022-07-29T23:16:13.3233807Z"));
    assert_eq!(e.sent_time, time("2022-07-29T23:15:43.1091982Z"));
    assert_eq!(e.headers.len(), 1);
    assert_eq!(
        e.headers.get("MT-Request-AcceptType"),
        Some(&json!([
            "urn:message:MassTransit.RequestResponseDemo:IOrderResponse"
        ]))
    );
    assert_eq!(
        e.host,
        host([
            "THINKPAD",
            "MassTransit.RpDemo.Request",
            "3820",
            "MassTransit.RpDemo.Request",
            "1.0.0.0",
            "6.0.5",
            "8.0.5.0",
            "Microsoft Windows NT 10.0.19044.0",
        ])
    );
    assert_eq!(
        e.message,
        json!({"orderId": "5ca13bde-8c17-4753-903a-a445389b98e5"})
    );
}

#[test]
fn fixture_04_v8_publish_rabbitmq() {
    assert_fixture_04(&parse(F04));
}

/// The values of fixture 04, shared with the PascalCase and relaxed-syntax variants.
fn assert_fixture_04(e: &Envelope) {
    assert_eq!(e.message_id, id("7c740000-a5be-c025-8e9a-08dabc788911"));
    assert_eq!(e.request_id, None);
    assert_eq!(e.correlation_id, None);
    assert_eq!(
        e.conversation_id,
        id("7c740000-a5be-c025-8c47-08dabc7888fc")
    );
    assert_eq!(e.initiator_id, None);
    assert_eq!(e.source_address, s("rabbitmq://localhost/PlaceOrder"));
    assert_eq!(
        e.destination_address,
        s("rabbitmq://localhost/TrainingContract:OrderPlacedEvent")
    );
    assert_eq!(e.response_address, None);
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&["urn:message:TrainingContract:OrderPlacedEvent"])
    );
    assert_eq!(e.expiration_time, None);
    assert_eq!(e.sent_time, time("2022-11-02T02:18:30.8073114Z"));
    assert!(e.headers.is_empty());
    assert_eq!(
        e.host,
        host([
            "NEPTON-WORK",
            "RabbitMQ",
            "29820",
            "RabbitMQ",
            "1.0.0.0",
            "6.0.10",
            "8.0.7.0",
            "Microsoft Windows NT 10.0.22621.0",
        ])
    );
    assert_eq!(
        e.message,
        json!({
            "orderId": "064bf0c3-e095-4518-a86d-1c8194efb792",
            "orderNumber": "Place order at: 11/2/2022 10:18:30 AM"
        })
    );
}

#[test]
fn fixture_06_v8_send_correlation_id_rabbitmq() {
    let e = parse(F06);
    assert_eq!(e.message_id, id("50460000-adda-54e1-1fa3-08dc67547d10"));
    assert_eq!(e.request_id, None);
    assert_eq!(e.correlation_id, id("7569172a-7c0e-44fb-a297-54bdebe6ce44"));
    assert_eq!(
        e.conversation_id,
        id("50460000-adda-54e1-c760-08dc67547d15")
    );
    assert_eq!(e.initiator_id, None);
    assert_eq!(
        e.source_address,
        s("rabbitmq://localhost/DESKTOPTNOQ92E_DotnetMassTran_bus_kbdyyyfp5jkqd4a4bdqgqidibq?temporary=true")
    );
    assert_eq!(
        e.destination_address,
        s("rabbitmq://localhost/submit-order")
    );
    assert_eq!(e.response_address, None);
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&["urn:message:DotnetMassTransitApp.Producer.Contracts:SubmitOrder"])
    );
    assert_eq!(e.expiration_time, None);
    assert_eq!(e.sent_time, time("2024-04-28T07:26:15.2890275Z"));
    assert!(e.headers.is_empty());
    assert_eq!(
        e.host,
        host([
            "DESKTOP-******",
            "DotnetMassTransitApp.Producer",
            "18000",
            "DotnetMassTransitApp.Producer",
            "1.0.0.0",
            "8.0.0",
            "8.2.1.0",
            "Microsoft Windows NT 10.0.19045.0",
        ])
    );
    // The correlation id is the order id.
    assert_eq!(
        e.message,
        json!({"orderId": "7569172a-7c0e-44fb-a297-54bdebe6ce44"})
    );
    assert_eq!(
        e.message["orderId"]
            .as_str()
            .and_then(|t| Uuid::parse_str(t).ok()),
        e.correlation_id
    );
}

#[test]
fn fixture_08_v8_custom_header_decimal_rabbitmq() {
    let e = parse(F08);
    assert_eq!(e.message_id, id("a88b0000-84d7-1ddb-d46d-08dd9af26165"));
    assert_eq!(e.request_id, None);
    assert_eq!(e.correlation_id, None);
    assert_eq!(
        e.conversation_id,
        id("a88b0000-84d7-1ddb-74fa-08dd9af26170")
    );
    assert_eq!(e.initiator_id, None);
    assert_eq!(
        e.source_address,
        s("rabbitmq://localhost/DESKTOP3VIT6KG_OrdersApi_bus_infoyyrr4hq7s4ptbdq3ih1g88?temporary=true")
    );
    assert_eq!(e.destination_address, s("rabbitmq://localhost/OrderCReted"));
    assert_eq!(e.response_address, None);
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&["urn:message:Contracts.Events:OrderCreated"])
    );
    assert_eq!(e.expiration_time, None);
    assert_eq!(e.sent_time, time("2025-05-24T18:39:56.3305069Z"));
    assert_eq!(e.headers.len(), 1);
    assert_eq!(e.headers.get_str("my-custom-header"), Some("value"));
    assert_eq!(e.headers.get_str("My-Custom-Header"), Some("value"));
    assert_eq!(
        e.host,
        host([
            "DESKTOP-3VIT6KG",
            "OrdersApi",
            "35752",
            "OrdersApi",
            "1.0.0.0",
            "8.0.16",
            "8.4.1.0",
            "Microsoft Windows NT 10.0.26100.0",
        ])
    );
    assert_eq!(
        e.message,
        json!({
            "id": 13,
            "orderId": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
            "createdAt": "2025-05-24T18:39:55.0334654Z",
            "totalAmount": "0"
        })
    );
    assert_eq!(e.message["totalAmount"], "0");
}

#[test]
fn fixture_11_v8_minimal_handwritten() {
    let e = parse(F11);
    assert_eq!(
        e,
        Envelope {
            message_id: id("181c0000-6393-3630-36a4-08daf4e7c6da"),
            message_type: types(&["urn:message:MassTransitRepro:SampleEvent"]),
            message: json!({}).into(),
            ..Envelope::default()
        }
    );
    assert_eq!(e.host, None);
    assert!(e.headers.is_empty());
    assert_eq!(e.sent_time, None);
}

#[test]
fn fixture_12_v7_newtonsoft_empty_guid_decimal() {
    let e = parse(F12);
    assert_eq!(e.message_id, id("49d10000-b882-08bf-329b-08dd38df2335"));
    assert_eq!(e.request_id, None);
    assert_eq!(e.correlation_id, Some(Uuid::nil()));
    assert_eq!(
        e.conversation_id,
        id("49d10000-b882-08bf-4406-08dd38df2331")
    );
    assert_eq!(e.initiator_id, id("14983d63-07ea-4f3e-9a3e-db959428d0e6"));
    assert_eq!(
        e.source_address,
        s("rabbitmq://localhost:0/CreateItemCommand")
    );
    assert_eq!(
        e.destination_address,
        s("rabbitmq://localhost:0/ItemCreatedNameFromAttribute")
    );
    assert_eq!(e.response_address, None);
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&[
            "urn:message:Play.Items.Contracts.Events:ItemCreated",
            "urn:message:Play.Common.Abs.Events:IEvent",
        ])
    );
    assert_eq!(e.expiration_time, None);
    assert_eq!(e.sent_time, time("2025-01-19T23:15:17.6029851Z"));
    assert!(e.headers.is_empty());
    assert_eq!(
        e.host,
        host([
            "CZ",
            "Play.Items.Api",
            "17052",
            "Play.Items.Api",
            "1.0.0.0",
            "8.0.11",
            "7.3.1.0",
            "Microsoft Windows NT 10.0.22631.0",
        ])
    );
    assert_eq!(
        e.message,
        json!({
            "itemId": "667b9fc4-a610-4deb-ad37-c50f5c8c2427",
            "name": "XXL Potion",
            "price": "66.99"
        })
    );
    assert_eq!(e.message["price"], "66.99");
}

#[test]
fn fixture_16_v5_deep_hierarchy_headers_array() {
    let e = parse(F16);
    assert_eq!(e.message_id, id("41070000-568d-0050-abc9-08d9bf138cfc"));
    assert_eq!(e.request_id, None);
    assert_eq!(e.correlation_id, None);
    assert_eq!(
        e.conversation_id,
        id("41070000-568d-0050-acfa-08d9bf138cfc")
    );
    assert_eq!(e.initiator_id, None);
    assert_eq!(
        e.source_address,
        s("rabbitmq://amqp.rabbit.svc.pik-digital.ru/pik/MOB02PIK_dotnet_bus_erdoyynstwyfyxfjbdc57nq5nt?durable=false&autodelete=true")
    );
    assert_eq!(
        e.destination_address,
        s("rabbitmq://amqp.rabbit.svc.pik-digital.ru/pik/PIK.ESB.Messages.Implementation.BOP:IdpTeam")
    );
    assert_eq!(e.response_address, None);
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&[
            "urn:message:PIK.ESB.Messages.Implementation.BOP:IdpTeam",
            "urn:message:PIK.ESB.Messages.Implementation.BOP:BopMessage",
            "urn:message:PIK.ESB.Messages.Implementation:Message",
            "urn:message:PIK.ESB.Messages:IMessage",
            "urn:message:PIK.ESB.Messages.BOP:IBopMessage",
            "urn:message:PIK.ESB.Messages.BOP:IIdpTeam",
        ])
    );
    assert_eq!(e.expiration_time, None);
    assert_eq!(e.sent_time, time("2021-12-14T15:08:12.9343701Z"));
    // `"headers": []`
    assert!(e.headers.is_empty());
    assert_eq!(
        e.host,
        host([
            "MOB02PIK",
            "dotnet",
            "18980",
            "PIK.BOP.IDP.Site",
            "1.0.0.0",
            "4.0.30319.42000",
            "5.5.1.0",
            "Microsoft Windows NT 10.0.17763.0",
        ])
    );
    let m = &e.message;
    assert_eq!(m["id"], 52935);
    assert_eq!(m["companyName"], "ГП-МСК ООО");
    assert_eq!(m["dateStart"], "2021-05-14T00:00:00");
    assert_eq!(m["created"], "2021-12-14T18:08:12.927");
    assert_eq!(m["messageSendDate"], "2021-12-14T18:08:12.9342242+03:00");
    assert_eq!(m["processUniqueId"], "19f3ab91-9439-47f7-99de-e556cfd7d151");
}

#[test]
fn fixture_17_v5_newtonsoft_response() {
    let e = parse(F17);
    assert_eq!(e.message_id, id("00000000-2700-0a00-8b04-08d5b4a2ef65"));
    assert_eq!(e.request_id, id("00000000-2700-0a00-e326-08d5b4a2ef63"));
    assert_eq!(e.correlation_id, None);
    assert_eq!(
        e.conversation_id,
        id("00000000-2700-0a00-3635-08d5b4a2ef64")
    );
    assert_eq!(e.initiator_id, None);
    assert_eq!(
        e.source_address,
        s("rabbitmq://localhost/check_order_queue")
    );
    assert_eq!(
        e.destination_address,
        s("rabbitmq://localhost/bus-WINBOOK-MassTransit.Sandbox.RequestResponse-yyyyyyb8yyfyy7r9bdk5jewgdd?durable=false&autodelete=true")
    );
    assert_eq!(e.response_address, None);
    assert_eq!(e.fault_address, None);
    assert_eq!(
        e.message_type,
        types(&["urn:message:MassTransit.Sandbox.RequestResponse.Contracts:OrderStatusResult"])
    );
    assert_eq!(e.expiration_time, None);
    assert_eq!(e.sent_time, time("2018-05-08T05:17:03.6952914Z"));
    assert!(e.headers.is_empty());
    assert_eq!(
        e.host,
        host([
            "WINBOOK",
            "MassTransit.Sandbox.RequestResponse",
            "13764",
            "MassTransit.Sandbox.RequestResponse",
            "1.0.0.0",
            "4.0.30319.42000",
            "5.0.0.1475",
            "Microsoft Windows NT 6.2.9200.0",
        ])
    );
    assert_eq!(
        e.message,
        json!({
            "orderId": "1",
            "timestamp": "2018-05-08T07:17:03.6952914+02:00",
            "statusCode": 1,
            "statusText": "Sent"
        })
    );
}

/// The top-level keys of a JSON object's text, in the order written (`serde_json::Value` sorts
/// them, so the order is read from the text).
fn keys_in_order(text: &[u8]) -> Vec<String> {
    /// Collects map keys, ignoring values.
    struct Keys(Vec<String>);

    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(KeysVisitor)
        }
    }

    /// The visitor behind [`Keys`].
    struct KeysVisitor;

    impl<'de> serde::de::Visitor<'de> for KeysVisitor {
        type Value = Keys;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
            let mut keys = Vec::new();
            while let Some((key, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                keys.push(key);
            }
            Ok(Keys(keys))
        }
    }

    serde_json::from_slice::<Keys>(text).unwrap().0
}

#[test]
fn every_fixture_round_trips_through_the_v8_shape() {
    for (name, body) in ALL {
        let envelope = parse(body);

        let written = serde_json::to_value(&envelope).unwrap();
        let mut keys: Vec<&str> = written
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = V8_KEYS.to_vec();
        keys.sort_unstable();
        expected.sort_unstable();
        assert_eq!(keys, expected, "fixture {name}");
        let reread = Envelope::from_value(written).unwrap();
        assert_eq!(reread, envelope, "fixture {name}");

        let text = serde_json::to_vec(&envelope).unwrap();
        assert_eq!(keys_in_order(&text), V8_KEYS, "fixture {name}");
        assert_eq!(text, envelope.to_vec(), "fixture {name}");
        assert_eq!(
            Envelope::from_slice(&text).unwrap(),
            envelope,
            "fixture {name}"
        );
    }
}

/// `key` with its first letter uppercased.
fn pascal(key: &str) -> String {
    let mut chars = key.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The object with every key in PascalCase (one level).
fn pascal_keys(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter().map(|(k, v)| (pascal(&k), v)).collect()
}

#[test]
fn fixture_04_with_pascal_case_keys() {
    let Value::Object(map) = serde_json::from_slice::<Value>(F04).unwrap() else {
        panic!("fixture 04 is an object");
    };
    let mut map = pascal_keys(map);
    // Newtonsoft with PascalCase names writes the host's keys that way too.
    if let Some(Value::Object(host)) = map.remove("Host") {
        map.insert("Host".to_owned(), Value::Object(pascal_keys(host)));
    }
    assert!(map.contains_key("MessageId") && map.contains_key("SentTime"));
    assert!(map.keys().all(|k| k.starts_with(char::is_uppercase)));
    assert!(map["Host"].get("MassTransitVersion").is_some());
    assert_eq!(map.len(), 15);

    let body = serde_json::to_vec(&Value::Object(map)).unwrap();
    let envelope = Envelope::from_slice(&body).unwrap();
    assert_fixture_04(&envelope);
    assert_eq!(envelope, parse(F04));
}

#[test]
fn fixture_04_with_comments_and_trailing_commas() {
    let text = std::str::from_utf8(F04).unwrap();
    let relaxed = text
        .replacen("{\n", "{\n // written by MassTransit 8.0.7\n", 1)
        .replace(
            "\"urn:message:TrainingContract:OrderPlacedEvent\"\n",
            "\"urn:message:TrainingContract:OrderPlacedEvent\", // the only type\n",
        )
        .replace(
            "\"Place order at: 11/2/2022 10:18:30 AM\"\n",
            "\"Place order at: 11/2/2022 10:18:30 AM\", /* trailing */\n",
        )
        .replace(
            "\"Microsoft Windows NT 10.0.22621.0\"\n }",
            "\"Microsoft Windows NT 10.0.22621.0\",\n },",
        );
    assert!(relaxed.contains("// written by") && relaxed.contains("// the only type"));
    assert!(relaxed.contains("AM\", /* trailing */") && relaxed.contains("0\",\n },\n}"));
    assert!(serde_json::from_str::<Value>(&relaxed).is_err());

    let envelope = Envelope::from_slice(relaxed.as_bytes()).unwrap();
    assert_fixture_04(&envelope);
    assert_eq!(envelope, parse(F04));
}

/// What sloppy but real producers send (hand-written publishers, scripts, other libraries):
/// only some keys, `message` first, ids that are GUIDs but not RFC 4122 versions, `amqp://`
/// addresses. MassTransit's System.Text.Json reader takes all of it.
#[test]
fn sloppy_envelopes_are_read() {
    let e = parse(
        br#"{"message": {"orderId": 7}, "messageType": ["urn:message:Shop:OrderPlaced"],
             "MESSAGEID": "00000000-0000-0000-0000-000000000001",
             "faultAddress": "amqp://broker/shop/order-faults", "unknown": {"x": [1, 2]}}"#,
    );
    assert_eq!(e.message_id, id("00000000-0000-0000-0000-000000000001"));
    assert_eq!(e.message["orderId"], 7);
    assert_eq!(
        e.fault_address.as_deref(),
        Some("amqp://broker/shop/order-faults")
    );
    assert_eq!(e.conversation_id, None);
    assert!(e.headers.is_empty());
    // Version nibble 0 and an unknown variant: still a GUID to .NET.
    let e = parse(br#"{"messageId": "6F1D2F3A-0C0B-0A09-E807-ABCDEFABCDEF", "message": {}}"#);
    assert_eq!(e.message_id, id("6f1d2f3a-0c0b-0a09-e807-abcdefabcdef"));
}

/// MassTransit's envelope types `messageType` as `string[]`: a single string does not
/// deserialize (System.Text.Json throws), so the message goes to `_error`.
#[test]
fn message_type_as_a_string_is_refused() {
    let err = Envelope::from_slice(
        br#"{"messageType": "urn:message:Shop:OrderPlaced", "message": {"orderId": 1}}"#,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("messageType: expected an array of URN strings, found a string"),
        "{err}"
    );
    let err = Envelope::from_slice(br#"{"messageType": ["urn:a", 5], "message": {}}"#).unwrap_err();
    assert!(err.to_string().contains("found a number"), "{err}");
}

/// Decimals written as JSON numbers (what Newtonsoft and hand-written publishers send) read as
/// the decimal the number spells.
#[test]
fn decimals_written_as_numbers_read_exactly() {
    use rust_decimal::Decimal;
    #[derive(serde::Deserialize)]
    struct Amounts {
        #[serde(with = "ferrybus_core::dotnet::decimal")]
        tiny: Decimal,
        #[serde(with = "ferrybus_core::dotnet::decimal")]
        huge: Decimal,
        #[serde(with = "ferrybus_core::dotnet::decimal")]
        price: Decimal,
        #[serde(with = "ferrybus_core::dotnet::decimal")]
        whole: Decimal,
    }
    let e = parse(
        br#"{"messageType": ["urn:message:Shop:Amounts"],
             "message": {"Tiny": 1e-7, "HUGE": 1e+21, "price": 66.99, "whole": 42}}"#,
    );
    let amounts: Amounts = e.message.bind().unwrap();
    assert_eq!(amounts.tiny.to_string(), "0.0000001");
    assert_eq!(amounts.huge.to_string(), "1000000000000000000000");
    assert_eq!(amounts.price.to_string(), "66.99");
    assert_eq!(amounts.whole.to_string(), "42");
}

/// The receive path parses a body once and keeps `message` as its text: every fixture's
/// payload text survives byte for byte (whitespace included) where the body is strict JSON.
#[test]
fn the_payload_is_kept_as_its_text() {
    let e = parse(br#"{"message":  { "a" : [1, 2.50, "x"] } , "messageType": []}"#);
    assert_eq!(e.message.json(), r#"{ "a" : [1, 2.50, "x"] }"#);
    for (name, body) in ALL {
        let e = parse(body);
        let reparsed: Value = serde_json::from_str(e.message.json()).unwrap();
        assert_eq!(&reparsed, e.message.value(), "fixture {name}");
    }
}
