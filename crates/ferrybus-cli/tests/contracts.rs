//! `ferrybus contracts import` and `ferrybus contracts check`: the realistic C# contracts of
//! `tests/fixtures/contracts` imported into Rust (checked in as `generated.rs` and compiled
//! here), payloads as System.Text.Json writes them read and written back unchanged, identities
//! as MassTransit computes them, and drift found in a real queue that keeps every message.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ferrybus::Message;
use ferrybus_testing::{mt_properties, unique, Probe};
use lapin::types::FieldTable;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use support::{failure, run};

/// The Rust the import makes of the C# files of `FILES`, compiled as part of this test
/// (it may name no crate but ferrybus, serde, serde_json and uuid:
/// `generated_code_needs_only_ferrybus_serde_serde_json_and_uuid`).
#[allow(missing_docs, unreachable_pub, dead_code)]
mod generated {
    include!("fixtures/contracts/generated.rs");
}

use generated::*;

const FILES: [&str; 4] = ["Orders.cs", "Payments.cs", "Catalog.cs", "Inventory.cs"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contracts")
}

/// `ferrybus <args>` run in the fixtures directory (so file names print as given).
fn ferrybus_in_fixtures(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrybus"))
        .args(args)
        .current_dir(fixtures())
        .env("AMQP_URL", ferrybus_testing::amqp_url())
        .stdin(Stdio::null())
        .output()
        .expect("the ferrybus binary runs")
}

#[test]
fn import_writes_the_checked_in_rust() {
    let mut args = vec!["contracts", "import"];
    args.extend(FILES);
    let out = ferrybus_in_fixtures(&args);
    let stdout = support::success(&out);
    let checked_in = fixtures().join("generated.rs");
    if std::env::var_os("FERRYBUS_UPDATE_FIXTURES").is_some() {
        std::fs::write(&checked_in, &stdout).unwrap();
    }
    assert_eq!(
        stdout,
        std::fs::read_to_string(&checked_in).unwrap(),
        "the import no longer writes tests/fixtures/contracts/generated.rs: run this test with FERRYBUS_UPDATE_FIXTURES=1 and review the difference"
    );

    // --output writes the same text to a file.
    let target = std::env::temp_dir().join(format!("{}.rs", unique("contracts")));
    let target_arg = target.display().to_string();
    let mut args = vec!["contracts", "import", "--output", &target_arg];
    args.extend(FILES);
    let out = ferrybus_in_fixtures(&args);
    assert_eq!(support::success(&out), "");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), stdout);
    std::fs::remove_file(target).unwrap();
}

#[test]
fn generated_code_needs_only_ferrybus_serde_serde_json_and_uuid() {
    let text = std::fs::read_to_string(fixtures().join("generated.rs")).unwrap();
    let mut roots: Vec<&str> = text
        .match_indices("::")
        .filter(|(i, _)| {
            *i == 0 || !text[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        })
        .filter_map(|(i, _)| text[i + 2..].split("::").next())
        .collect();
    // Paths inside `with = "…"` strings start without `::`.
    roots.extend(
        text.match_indices("with = \"")
            .map(|(i, m)| text[i + m.len()..].split("::").next().unwrap()),
    );
    roots.sort_unstable();
    roots.dedup();
    assert_eq!(roots, ["ferrybus", "serde", "serde_json", "std", "uuid"]);
}

/// Reads `file` of the payload fixtures as `T`, writes it back, and checks the JSON is the
/// same (every member, every value's text).
fn round_trip<T: Serialize + DeserializeOwned>(file: &str) -> T {
    let text = std::fs::read_to_string(fixtures().join("payloads").join(file)).unwrap();
    let written_by_dotnet: Value = serde_json::from_str(&text).unwrap();
    let message: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    // Compared as text parsed back: a `float` is written with f32's shortest digits.
    let written_by_rust: Value =
        serde_json::from_str(&serde_json::to_string(&message).unwrap()).unwrap();
    assert_eq!(written_by_rust, written_by_dotnet, "{file}");
    message
}

#[test]
fn payloads_written_by_system_text_json_round_trip() {
    let placed: OrderPlaced = round_trip("OrderPlaced.json");
    assert_eq!(placed.payment_method, PaymentMethod::BankTransfer);
    // Beyond 2^53, every digit kept.
    assert_eq!(placed.loyalty_points, 9_007_199_254_740_993);
    assert_eq!(placed.lines[0].unit_price.to_string(), "12.50");
    assert_eq!(placed.discount, None);

    let shipped: OrderShipped = round_trip("OrderShipped.json");
    assert_eq!(shipped.carrier, Carrier::PostNL);
    assert!(shipped.gift.contains(GiftOptions::WRAPPED));
    assert_eq!(shipped.label, b"%PDF-1.4\n");
    assert_eq!(shipped.handling_time.num_milliseconds(), 93_784_500);
    assert_eq!(shipped.parcel_weight, 1.25);
    assert_eq!(
        shipped.delivery_windows[1].to_rfc3339(),
        "2025-05-27T13:30:00.500+02:00"
    );

    let requested: Requested = round_trip("Requested.json");
    assert_eq!(requested.state, RefundState::Rejected);
    assert_eq!(requested.ledger_sequence, u64::MAX);
    assert_eq!(requested.reason_code, "DAMAGED");

    let settlement: SettlementReceived = round_trip("SettlementReceived.json");
    assert_eq!(
        settlement.signature.as_deref(),
        Some(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9][..])
    );
    assert_eq!(settlement.entries[1].iban, None);
    assert_eq!(settlement.region, 'E');

    // Types that contain each other are boxed where they close a cycle, and only there.
    let updated: BookUpdated = round_trip("BookUpdated.json");
    let book: &Book = &updated.book;
    let series: &Series = book.series.as_deref().unwrap();
    let first: &Book = &series.first_book;
    assert_eq!(first.title, "The First Voyage");
    let sequel: Option<&Book> = book.sequel.as_deref();
    assert_eq!(sequel.unwrap().isbn, "978-0-00-000002-8");
    let editions: &Vec<Book> = &book.editions;
    assert_eq!(editions[0].editions, []);
    // Two types holding each other without `?` in between: both fields boxed.
    fn subject(biography: Biography) -> Box<Author> {
        biography.subject
    }
    fn biography(author: Author) -> Box<Biography> {
        author.biography
    }
    let _ = (subject, biography);

    // .NET values inside dictionaries and nested or nullable lists, enum keys by name.
    let counted: StockCounted = round_trip("StockCounted.json");
    assert_eq!(counted.counted_at["BK-2"].timestamp_subsec_millis(), 500);
    assert_eq!(counted.unit_cost["BK-1"].to_string(), "4.10");
    assert_eq!(counted.promised_by["BK-1"].offset().local_minus_utc(), 7200);
    let restock = &counted.restock_time[&"7569172a-7c0e-44fb-a297-54bdebe6ce44".parse().unwrap()];
    assert_eq!(restock.num_minutes(), -30);
    assert_eq!(counted.barcodes["BK-1"], [1, 2, 3, 4]);
    assert_eq!(counted.recounts, None);
    assert_eq!(counted.price_tiers[0][1].to_string(), "11.00");
    assert_eq!(counted.delivery_slots[0][1].timestamp_subsec_millis(), 500);
    assert_eq!(counted.titles_by_level[&StockLevel::Plenty], 250);
    assert_eq!(
        counted.shelf_times["A1"].as_ref().unwrap()[1].num_hours(),
        24
    );
    assert_eq!(counted.shelf_times["B2"], None);
    // What .NET also reads: a missing nullable list, decimals as numbers, enum keys as numbers.
    let mut also = payload("StockCounted.json");
    also.as_object_mut().unwrap().remove("recounts");
    also["priceTiers"] = json!([[12.5]]);
    also["titlesByLevel"] = json!({"10": 1, "Low": 2});
    let also: StockCounted = serde_json::from_value(also).unwrap();
    assert_eq!(also.recounts, None);
    assert_eq!(also.price_tiers[0][0].to_string(), "12.5");
    assert_eq!(also.titles_by_level[&StockLevel::Plenty], 1);
    let mut unknown = payload("StockCounted.json");
    unknown["titlesByLevel"] = json!({"Overflowing": 1});
    assert!(serde_json::from_value::<StockCounted>(unknown).is_err());

    let captured: ICardPaymentCaptured = round_trip("ICardPaymentCaptured.json");
    assert_eq!(captured.card_last4, "4242");

    // .NET reads names ignoring case, and so do the generated types for the C# spelling.
    let pascal: OrderLine =
        serde_json::from_value(json!({"Sku": "BK-1", "Quantity": 1, "UnitPrice": "1.00"})).unwrap();
    assert_eq!(pascal.sku, "BK-1");
    // An enum value .NET never writes is refused, not guessed.
    let mut bad = serde_json::to_value(&placed).unwrap();
    bad["paymentMethod"] = json!(3);
    assert!(serde_json::from_value::<OrderPlaced>(bad).is_err());
}

/// MassTransit's identities (`MessageTypeCache<T>.MessageTypes`: the type, its base classes,
/// then its interfaces; `MessageUrn.ForType`; the entity name formatter honouring
/// `[EntityName]`).
#[test]
fn identities_are_masstransit_s() {
    let t = OrderPlaced::message_type();
    assert_eq!(
        t.urn(),
        "urn:message:Bookstore.Contracts.Orders:OrderPlaced"
    );
    assert_eq!(t.entity_name(), "order-placed");
    assert_eq!(
        t.urns(),
        [
            "urn:message:Bookstore.Contracts.Orders:OrderPlaced",
            "urn:message:Bookstore.Contracts.Orders:IOrderEvent",
        ]
    );

    let t = OrderShipped::message_type();
    assert_eq!(t.urn(), "urn:message:bookstore:order-shipped");
    assert_eq!(t.entity_name(), "Bookstore.Contracts.Orders:OrderShipped");
    assert_eq!(
        t.urns(),
        [
            "urn:message:bookstore:order-shipped",
            "urn:message:Bookstore.Contracts.Orders:ShipmentEvent",
            "urn:message:Bookstore.Contracts.Orders:IOrderEvent",
        ]
    );

    let t = Requested::message_type();
    assert_eq!(
        t.urn(),
        "urn:message:Bookstore.Contracts.Payments:Refunds+Requested"
    );
    assert_eq!(
        t.dotnet_name(),
        "Bookstore.Contracts.Payments.Refunds+Requested"
    );
    assert_eq!(t.fault().entity_name(), "refund-requested-faults");

    let t = ICardPaymentCaptured::message_type();
    assert_eq!(t.entity_name(), "card-payment-captured");
    assert_eq!(
        t.urns(),
        [
            "urn:message:Bookstore.Contracts.Payments:ICardPaymentCaptured",
            "urn:message:Bookstore.Contracts.Payments:IPaymentCaptured",
        ]
    );
    // [MessageUrn(…, false)]: the URN as given.
    let t = StockCounted::message_type();
    assert_eq!(t.urn(), "urn:bookstore:inventory:stock-counted");
    assert_eq!(
        t.entity_name(),
        "Bookstore.Contracts.Inventory:StockCounted"
    );
    assert_eq!(
        SettlementReceived::message_type().urns(),
        ["urn:message:Bookstore.Contracts.Payments:SettlementReceived"]
    );
}

#[test]
fn what_cannot_be_mapped_is_listed_with_file_and_line() {
    let out = ferrybus_in_fixtures(&["contracts", "import", "bad/Unmappable.cs"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing is written");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 6, "{stderr}");
    for (line, prefix) in lines.iter().zip([
        "bad/Unmappable.cs:9: cannot map StockCounted.Largest",
        "bad/Unmappable.cs:10: cannot map StockCounted.CountedAt: dictionary keys of type object",
        "bad/Unmappable.cs:11: cannot map StockCounted.Value: type Money",
        "bad/Unmappable.cs:13: StockMoved: base type AuditedEvent is not declared",
        "bad/Unmappable.cs:15: Batch is generic",
        "error: 5 things in the C# contracts cannot be mapped",
    ]) {
        assert!(
            line.starts_with(prefix),
            "{line:?} should start with {prefix:?}"
        );
    }

    let out = ferrybus_in_fixtures(&["contracts", "import", "Orders.cs", "bad/Broken.cs"]);
    let error = failure(&out, 1);
    assert!(
        error.starts_with("error: bad/Broken.cs:5: syntax error"),
        "{error}"
    );
    assert!(out.stdout.is_empty());
}

/// A MassTransit envelope of `message_type` around `message`.
fn envelope(id: &str, message_type: &str, message: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "messageId": id,
        "conversationId": id,
        "sourceAddress": "rabbitmq://localhost/order-api",
        "destinationAddress": "rabbitmq://localhost/billing",
        "messageType": [message_type],
        "sentTime": "2025-05-24T18:00:00Z",
        "headers": {},
        "message": message,
    }))
    .unwrap()
}

fn payload(file: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join("payloads").join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn check_finds_each_kind_of_drift_and_leaves_every_message() {
    let probe = Probe::connect(&ferrybus_testing::amqp_url()).await;
    let q = unique("contracts-check");
    probe.track(&[q.as_str()], &[]);
    probe
        .declare_queue(&q, true, FieldTable::default())
        .await
        .unwrap();
    let placed_urn = "urn:message:Bookstore.Contracts.Orders:OrderPlaced";
    let shipped_urn = "urn:message:bookstore:order-shipped";

    // 1. As .NET writes it.
    let clean = payload("OrderPlaced.json");
    // 2. A producer that drifted: an enum as a string, a number where .NET wants a string, a
    //    member gone, a member .NET does not know, a name in another case.
    let mut drifted = clean.clone();
    drifted["paymentMethod"] = json!("BankTransfer");
    drifted["customerEmail"] = json!(42);
    drifted.as_object_mut().unwrap().remove("total");
    drifted["giftWrap"] = json!(true);
    let tags = drifted.as_object_mut().unwrap().remove("tags").unwrap();
    drifted["Tags"] = tags;
    // 3. Malformed Guid and date.
    let mut shipped = payload("OrderShipped.json");
    shipped["orderId"] = json!("7569172a7c0e44fba29754bdebe6ce44-x");
    shipped["occurredAt"] = json!("25/05/2025 08:00");
    // 4. A type no contract has.
    let messages = [
        (placed_urn, clean),
        (placed_urn, drifted),
        (shipped_urn, shipped),
        (
            "urn:message:Bookstore.Contracts.Orders:OrderCancelled",
            json!({"orderId": "7569172a-7c0e-44fb-a297-54bdebe6ce44"}),
        ),
    ];
    let mut ids = Vec::new();
    for (urn, message) in messages {
        let id = uuid::Uuid::now_v7().to_string();
        probe
            .publish("", &q, &envelope(&id, urn, message), mt_properties(&id))
            .await;
        ids.push(id);
    }
    assert_eq!(probe.queue_count(&q).await, Some(4));

    let dir = fixtures();
    let orders = dir.join("Orders.cs").display().to_string();
    let payments = dir.join("Payments.cs").display().to_string();
    let args = [
        "contracts",
        "check",
        "--contracts",
        &orders,
        &payments,
        "--queue",
        &q,
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = run(&json_args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: 6 errors in the messages of"),
        "{stderr}"
    );
    println!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
    let reports: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 4);
    let of = |i: usize| -> Vec<(String, String, String)> {
        assert_eq!(reports[i]["message_id"], ids[i]);
        reports[i]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                assert!(f["detail"].as_str().is_some_and(|d| !d.is_empty()));
                (
                    f["path"].as_str().unwrap().to_owned(),
                    f["kind"].as_str().unwrap().to_owned(),
                    f["severity"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let t = |p: &str, k: &str, s: &str| (p.to_owned(), k.to_owned(), s.to_owned());
    assert_eq!(reports[0]["message_type"], placed_urn);
    assert_eq!(of(0), []);
    assert_eq!(
        of(1),
        [
            t("$.customerEmail", "wrong-shape", "error"),
            t("$.total", "missing-member", "error"),
            t("$.paymentMethod", "wrong-shape", "error"),
            t("$.tags", "case-only", "note"),
            t("$.giftWrap", "unexpected-member", "warning"),
        ]
    );
    assert_eq!(
        reports[1]["findings"][0]["detail"],
        "a number where .NET wants a string"
    );
    assert!(reports[1]["findings"][2]["detail"]
        .as_str()
        .unwrap()
        .contains("as a string (\"BankTransfer\") where .NET expects a number"));
    assert_eq!(reports[2]["message_type"], shipped_urn);
    assert_eq!(
        of(2),
        [
            t("$.orderId", "wrong-shape", "error"),
            t("$.occurredAt", "wrong-shape", "error"),
        ]
    );
    assert_eq!(
        reports[3]["message_type"],
        "urn:message:Bookstore.Contracts.Orders:OrderCancelled"
    );
    assert_eq!(of(3), [t("$", "unknown-message-type", "error")]);

    // Every message is still there, in its order.
    assert_eq!(probe.queue_count(&q).await, Some(4));

    // The text report, with --max.
    let mut max_args = args.to_vec();
    max_args.extend(["--max", "2"]);
    let out = run(&max_args).await;
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(&format!(
            "{}  {placed_urn}\n  matches its contract\n",
            ids[0]
        )),
        "{text}"
    );
    assert!(text.contains("  error   missing-member      $.total: OrderPlaced.Total (decimal) is missing; .NET reads its default value\n"), "{text}");
    assert!(
        text.ends_with(&format!(
        "2 of 4 messages in {q} checked: 3 errors, 1 warning, 1 note; they are still in the queue\n"
    )),
        "{text}"
    );
    for id in &ids {
        let message = probe.get(&q).await.expect("still in the queue");
        assert_eq!(
            message.properties.message_id().as_ref().unwrap().as_str(),
            id
        );
    }

    // An unknown queue.
    let missing = unique("contracts-missing");
    let mut missing_args = args.to_vec();
    missing_args[6] = &missing;
    let out = run(&missing_args).await;
    let error = failure(&out, 1);
    assert!(
        error.contains(&format!("queue {missing} does not exist")),
        "{error}"
    );
    probe.cleanup().await;
}
