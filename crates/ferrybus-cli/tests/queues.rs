//! `ferrybus errors …` and `ferrybus skipped …` on the real broker: messages moved to
//! `<queue>_error` as a .NET MassTransit service moves them (original body and properties, the
//! `MT-Fault-*` / `MT-Host-*` headers added), looked at, replayed and purged.

mod support;

use ferrybus_testing::{amqp_url, eventually, has_header, header_str, unique, Probe, WAIT};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{json, Value};
use support::{envelope, failure, faulted_properties, json_lines, run, success};

/// An endpoint queue `q` with an error queue holding three faulted messages; returns the ids in
/// queue order.
async fn faulted_endpoint(probe: &Probe, q: &str) -> Vec<String> {
    probe.track_endpoint(q);
    probe
        .declare_queue(q, true, FieldTable::default())
        .await
        .unwrap();
    let error = format!("{q}_error");
    probe
        .declare_queue(&error, true, FieldTable::default())
        .await
        .unwrap();
    let input = format!("rabbitmq://localhost/{q}");
    let messages = [
        (
            "OrderPlaced",
            "Npgsql.PostgresException",
            "42P01: relation \"invoices\" does not exist",
            "2025-05-24T18:00:00Z",
        ),
        (
            "OrderPlaced",
            "InvalidOrder",
            "currency must be three capital letters, got \"try\"",
            "2025-05-24T19:00:00Z",
        ),
        (
            "RefundRequested",
            "TimeoutException",
            "the payment gateway did not answer within 30s",
            "2025-05-24T20:00:00Z",
        ),
    ];
    let mut ids = Vec::new();
    for (message_type, exception_type, exception, at) in messages {
        let id = uuid::Uuid::now_v7().to_string();
        let body = envelope(
            &id,
            &format!("Bookstore.Contracts:{message_type}"),
            json!({"orderId": id}),
        );
        let properties = faulted_properties(&id, &input, exception_type, exception, at);
        probe.publish("", &error, &body, properties).await;
        ids.push(id);
    }
    ids
}

fn ids_of(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["messageId"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_every_message_and_leaves_them_in_order() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-list");
    let ids = faulted_endpoint(&probe, &q).await;
    let error = format!("{q}_error");

    let lines = json_lines(&success(&run(&["errors", "list", &q, "--json"]).await));
    assert_eq!(ids_of(&lines), ids, "in queue order");
    let first = &lines[0];
    assert_eq!(
        first["messageType"],
        "urn:message:Bookstore.Contracts:OrderPlaced"
    );
    assert_eq!(first["exceptionType"], "Npgsql.PostgresException");
    assert_eq!(
        first["exceptionMessage"],
        "42P01: relation \"invoices\" does not exist"
    );
    assert_eq!(first["faultedAt"], "2025-05-24T18:00:00.000Z");
    assert_eq!(first["retryCount"], 2);
    assert_eq!(first["inputAddress"], format!("rabbitmq://localhost/{q}"));
    assert_eq!(first["consumerType"], "Billing.InvoiceConsumer");
    assert_eq!(first["host"], "billing-7d9f/Billing.Api");
    assert_eq!(first["position"], 1);
    assert_eq!(
        probe.queue_count(&error).await,
        Some(3),
        "nothing was taken out"
    );

    // Again, by the error queue's own name: the same messages in the same order.
    let again = json_lines(&success(&run(&["errors", "list", &error, "--json"]).await));
    assert_eq!(ids_of(&again), ids);
    assert!(
        again.iter().all(|l| l["redelivered"] == true),
        "peeking redelivers"
    );

    // The table for people.
    let table = success(&run(&["errors", "list", &q]).await);
    for id in &ids {
        assert!(table.contains(id.as_str()), "{table}");
    }
    assert!(
        table.contains("Bookstore.Contracts:RefundRequested"),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "3 of 3 messages in {error} shown; they are still in the queue"
        )),
        "{table}"
    );

    // Filters: type, exception text, time, limit.
    let only = |args: &[&str]| {
        let mut all = vec!["errors", "list", q.as_str(), "--json"];
        all.extend_from_slice(args);
        let args: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ids_of(&json_lines(&success(&run(&args).await)))
        }
    };
    assert_eq!(only(&["--type", "refundrequested"]).await, [ids[2].clone()]);
    assert_eq!(
        only(&["--exception", "CAPITAL LETTERS"]).await,
        [ids[1].clone()]
    );
    assert_eq!(
        only(&["--exception", "postgresexception"]).await,
        [ids[0].clone()]
    );
    assert_eq!(
        only(&[
            "--since",
            "2025-05-24T18:30:00Z",
            "--until",
            "2025-05-24T20:00:00Z"
        ])
        .await,
        [ids[1].clone()]
    );
    assert_eq!(only(&["--limit", "2"]).await, ids[..2].to_vec());
    assert_eq!(probe.queue_count(&error).await, Some(3));

    let line = failure(
        &run(&["errors", "list", &q, "--since", "yesterday"]).await,
        2,
    );
    assert!(line.contains("--since"), "{line}");
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_prints_one_message_and_keeps_it() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-show");
    let ids = faulted_endpoint(&probe, &q).await;
    let error = format!("{q}_error");

    let shown: Value = serde_json::from_str(&success(
        &run(&["errors", "show", &q, &ids[1], "--json"]).await,
    ))
    .unwrap();
    assert_eq!(shown["messageId"], ids[1].as_str());
    assert_eq!(shown["position"], 2);
    assert_eq!(shown["headers"]["MT-Fault-ExceptionType"], "InvalidOrder");
    assert_eq!(shown["headers"]["MT-Fault-RetryCount"], 2);
    assert_eq!(
        shown["properties"]["content_type"],
        "application/vnd.masstransit+json"
    );
    assert_eq!(shown["bodyEncoding"], "json");
    assert_eq!(shown["body"]["message"]["orderId"], ids[1].as_str());

    let text = success(&run(&["errors", "show", &error, &ids[0].to_uppercase()]).await);
    assert!(
        text.starts_with(&format!("message {} in {error} (position 1 of 3", ids[0])),
        "{text}"
    );
    assert!(text.contains("  MT-Fault-StackTrace: at Billing.InvoiceConsumer.Consume()\n         at MassTransit.Pipe"), "{text}");
    assert!(
        text.contains("\"orderId\": \""),
        "the body is pretty-printed: {text}"
    );

    let missing = uuid::Uuid::now_v7().to_string();
    let line = failure(&run(&["errors", "show", &q, &missing]).await, 1);
    assert_eq!(
        line,
        format!("error: no message {missing} among the 3 messages of {error}")
    );
    assert_eq!(probe.queue_count(&error).await, Some(3));
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_puts_messages_back_without_the_fault_headers() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-replay");
    let ids = faulted_endpoint(&probe, &q).await;
    let error = format!("{q}_error");

    // One message, by id: it goes to its input queue, the others stay in order.
    let out = success(&run(&["errors", "replay", &q, "--message-id", &ids[1]]).await);
    assert_eq!(
        out,
        format!("replayed {} to {q}\nreplayed 1, failed 0\n", ids[1])
    );
    assert_eq!(probe.queue_count(&q).await, Some(1));
    let copy = probe.get(&q).await.expect("the replayed copy");
    assert_eq!(
        copy.delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .as_str(),
        ids[1]
    );
    assert_eq!(
        copy.delivery
            .properties
            .correlation_id()
            .as_ref()
            .unwrap()
            .as_str(),
        ids[1]
    );
    assert_eq!(*copy.delivery.properties.delivery_mode(), Some(2));
    let body: Value = serde_json::from_slice(&copy.delivery.data).unwrap();
    assert_eq!(body["messageId"], ids[1].as_str(), "the same body");
    assert_eq!(
        header_str(&copy, "Tenant").as_deref(),
        Some("acme"),
        "application headers are kept"
    );
    for name in [
        "MT-Reason",
        "MT-Fault-Message",
        "MT-Fault-InputAddress",
        "MT-Fault-RetryCount",
        "MT-Host-MachineName",
    ] {
        assert!(!has_header(&copy, name), "{name} is not carried");
    }
    let left = json_lines(&success(&run(&["errors", "list", &q, "--json"]).await));
    assert_eq!(ids_of(&left), [ids[0].clone(), ids[2].clone()]);

    // The rest, to another queue.
    let other = unique("cli-replay-to");
    probe
        .declare_queue(&other, true, FieldTable::default())
        .await
        .unwrap();
    let out = success(&run(&["errors", "replay", &q, "--all", "--to", &other, "--json"]).await);
    let lines = json_lines(&out);
    assert_eq!(lines[0], json!({"messageId": ids[0], "replayed": other}));
    assert_eq!(lines[1], json!({"messageId": ids[2], "replayed": other}));
    assert_eq!(lines[2], json!({"replayed": 2, "failed": 0}));
    assert_eq!(probe.queue_count(&other).await, Some(2));
    assert_eq!(probe.queue_count(&error).await, Some(0));
    let line = failure(&run(&["errors", "replay", &q]).await, 2);
    assert!(line.contains("--all"), "{line}");
    probe.cleanup().await;
}

/// A message leaves the error queue only once the broker confirmed its copy: an input queue
/// that refuses it (a full queue with `reject-publish`: the broker nacks), or one that does not
/// exist, leaves it where it is, and the run fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_keeps_what_the_broker_did_not_confirm() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-refuse");
    probe.track_endpoint(&q);
    let mut full = FieldTable::default();
    full.insert("x-max-length".into(), AMQPValue::LongLongInt(0));
    full.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    probe.declare_queue(&q, true, full).await.unwrap();
    let error = format!("{q}_error");
    probe
        .declare_queue(&error, true, FieldTable::default())
        .await
        .unwrap();
    let refused = uuid::Uuid::now_v7().to_string();
    let gone = uuid::Uuid::now_v7().to_string();
    for (id, input) in [(&refused, q.clone()), (&gone, unique("cli-no-such-queue"))] {
        let body = envelope(id, "Bookstore.Contracts:OrderPlaced", json!({}));
        let properties = faulted_properties(
            id,
            &format!("rabbitmq://localhost/{input}"),
            "E",
            "boom",
            "2025-05-24T18:00:00Z",
        );
        probe.publish("", &error, &body, properties).await;
    }

    let out = run(&["errors", "replay", &q, "--all"]).await;
    let line = failure(&out, 1);
    assert_eq!(line, "error: 2 of 2 messages could not be replayed");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with(&format!(
            "failed {refused}: the broker refused it (nack); it stays in {error}"
        )),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with(&format!("failed {gone}: queue cli-no-such-queue-")),
        "{stdout}"
    );
    assert!(
        lines[1].ends_with(&format!("does not exist; it stays in {error}")),
        "{stdout}"
    );
    assert_eq!(lines[2], "replayed 0, failed 2");
    let lines = json_lines(&success(&run(&["errors", "list", &q, "--json"]).await));
    assert_eq!(
        ids_of(&lines),
        [refused, gone],
        "both are still in the error queue, in order"
    );
    assert_eq!(probe.queue_count(&q).await, Some(0));
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_needs_yes_and_deletes_only_what_it_is_told() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-purge");
    let ids = faulted_endpoint(&probe, &q).await;
    let error = format!("{q}_error");

    let line = failure(&run(&["errors", "purge", &q, "--all"]).await, 2);
    assert!(line.contains("--yes"), "{line}");
    assert_eq!(probe.queue_count(&error).await, Some(3));

    let out = success(&run(&["errors", "purge", &q, "--message-id", &ids[0], "--yes"]).await);
    assert_eq!(out.lines().last(), Some("purged 1, failed 0"));
    assert_eq!(
        ids_of(&json_lines(&success(
            &run(&["errors", "list", &q, "--json"]).await
        ))),
        ids[1..].to_vec()
    );

    let out = success(
        &run(&[
            "errors",
            "purge",
            &q,
            "--all",
            "--exception",
            "gateway",
            "--yes",
        ])
        .await,
    );
    assert_eq!(out.lines().last(), Some("purged 1, failed 0"));
    let out = success(&run(&["errors", "purge", &q, "--all", "--yes", "--json"]).await);
    assert_eq!(
        json_lines(&out),
        [
            json!({"messageId": ids[1], "purged": true}),
            json!({"purged": 1, "failed": 0})
        ]
    );
    assert_eq!(probe.queue_count(&error).await, Some(0));
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_queues_have_the_same_verbs() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-skipped");
    probe.track_endpoint(&q);
    probe
        .declare_queue(&q, true, FieldTable::default())
        .await
        .unwrap();
    let skipped = format!("{q}_skipped");
    probe
        .declare_queue(&skipped, true, FieldTable::default())
        .await
        .unwrap();
    let id = uuid::Uuid::now_v7().to_string();
    let mut headers = FieldTable::default();
    headers.insert("MT-Reason".into(), support::s("dead-letter"));
    headers.insert("MT-Host-MachineName".into(), support::s("billing-7d9f"));
    let body = envelope(&id, "Bookstore.Contracts:Unknown", json!({}));
    probe
        .publish(
            "",
            &skipped,
            &body,
            ferrybus_testing::mt_properties(&id).with_headers(headers),
        )
        .await;

    let lines = json_lines(&success(&run(&["skipped", "list", &q, "--json"]).await));
    assert_eq!(ids_of(&lines), std::slice::from_ref(&id));
    assert_eq!(lines[0]["reason"], "dead-letter");
    assert_eq!(
        lines[0]["messageType"],
        "urn:message:Bookstore.Contracts:Unknown"
    );
    let table = success(&run(&["skipped", "list", &q]).await);
    assert!(table.contains("skipped by"), "{table}");
    assert!(
        table.contains("dead-letter") && table.contains("billing-7d9f"),
        "{table}"
    );
    let shown = success(&run(&["skipped", "show", &skipped, &id]).await);
    assert!(shown.contains("MT-Reason: dead-letter"), "{shown}");

    let out = success(&run(&["skipped", "replay", &q, "--all"]).await);
    assert_eq!(out.lines().last(), Some("replayed 1, failed 0"));
    let copy = eventually("the replayed message", WAIT, || probe.get(&q)).await;
    assert!(!has_header(&copy, "MT-Reason") && !has_header(&copy, "MT-Host-MachineName"));
    assert_eq!(probe.queue_count(&skipped).await, Some(0));
    // Nothing in the error queue of that endpoint: it does not exist.
    let line = failure(&run(&["errors", "list", &q]).await, 1);
    assert_eq!(line, format!("error: queue {q}_error does not exist on vhost / of amqp://guest:***@127.0.0.1:5672/%2f"));
    probe.cleanup().await;
}

/// No command prints a password: not in results, not in errors, not in help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_never_appear() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-secret");
    let ids = faulted_endpoint(&probe, &q).await;
    let url = amqp_url();
    let wrong = url.replacen("guest:guest@", "guest:wr0ng-s3cret@", 1);
    assert_ne!(url, wrong, "AMQP_URL carries guest:guest credentials");

    let out = run(&["--amqp-url", &wrong, "errors", "list", &q]).await;
    let line = failure(&out, 1);
    assert!(line.contains("guest:***@"), "{line}");
    assert!(!line.contains("wr0ng-s3cret"), "{line}");
    for password in ["wr0ng;s3(cr)et", "wr0ng,s3cret!", "wr0ng=s3*cret"] {
        let wrong = url.replacen("guest:guest@", &format!("guest:{password}@"), 1);
        let out = run(&["--amqp-url", &wrong, "errors", "list", &q]).await;
        let line = failure(&out, 1);
        assert!(line.contains("guest:***@"), "{line}");
        assert!(!line.contains(password), "{line}");
    }

    for args in [
        vec!["--amqp-url", url.as_str(), "errors", "list", q.as_str()],
        vec![
            "--amqp-url",
            url.as_str(),
            "errors",
            "show",
            q.as_str(),
            ids[0].as_str(),
        ],
        vec!["--amqp-url", url.as_str(), "topology", q.as_str()],
        vec![
            "--amqp-url",
            url.as_str(),
            "errors",
            "list",
            "no-such-queue-at-all",
        ],
        vec![
            "--amqp-url",
            "amqp://guest:guest@",
            "errors",
            "list",
            q.as_str(),
        ],
        vec!["--help"],
        vec!["errors", "list", "--help"],
    ] {
        let out = run(&args).await;
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("guest:guest"), "{args:?}: {all}");
    }
    probe.cleanup().await;
}

/// Every copy of a message id is selected (a message faulted twice has two copies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_copy_of_a_message_id_is_selected() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-copies");
    let ids = faulted_endpoint(&probe, &q).await;
    let error = format!("{q}_error");
    let body = envelope(&ids[0], "Bookstore.Contracts:OrderPlaced", json!({}));
    let properties = faulted_properties(
        &ids[0],
        &format!("rabbitmq://localhost/{q}"),
        "E",
        "again",
        "2025-05-25T18:00:00Z",
    );
    probe.publish("", &error, &body, properties).await;

    let out = success(&run(&["errors", "replay", &q, "--message-id", &ids[0]]).await);
    assert_eq!(out.lines().last(), Some("replayed 2, failed 0"), "{out}");
    assert_eq!(probe.queue_count(&q).await, Some(2));
    assert_eq!(
        ids_of(&json_lines(&success(
            &run(&["errors", "list", &q, "--json"]).await
        ))),
        ids[1..].to_vec()
    );
    probe.cleanup().await;
}

/// A reader that goes away (`| head -1`) ends the listing quietly, and the messages stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_output_ends_the_listing_quietly() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-pipe");
    faulted_endpoint(&probe, &q).await;
    let error = format!("{q}_error");
    let out = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ferrybus"))
            .args(["--amqp-url", &amqp_url(), "errors", "list", &q, "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // nobody reads
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(probe.queue_count(&error).await, Some(3));
    probe.cleanup().await;
}

/// Killed in the middle of a replay, nothing is lost: every message is in the error queue or in
/// its input queue, and at most one (confirmed, not yet removed) is in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_killed_midway_loses_nothing() {
    const COUNT: usize = 300;
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-kill");
    probe.track_endpoint(&q);
    probe
        .declare_queue(&q, true, FieldTable::default())
        .await
        .unwrap();
    let error = format!("{q}_error");
    probe
        .declare_queue(&error, true, FieldTable::default())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..COUNT {
        let id = uuid::Uuid::now_v7().to_string();
        let body = envelope(&id, "Bookstore.Contracts:OrderPlaced", json!({}));
        let properties = faulted_properties(
            &id,
            &format!("rabbitmq://localhost/{q}"),
            "E",
            "boom",
            "2025-05-24T18:00:00Z",
        );
        probe.publish("", &error, &body, properties).await;
        ids.push(id);
    }

    let queue = q.clone();
    tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ferrybus"))
            .args([
                "--amqp-url",
                &amqp_url(),
                "errors",
                "replay",
                &queue,
                "--all",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // Kill it as soon as it has replayed a few.
        for _ in 0..5 {
            if lines.next().is_none() {
                break;
            }
        }
        let _ = child.kill();
        child.wait().unwrap();
    })
    .await
    .unwrap();

    // The broker returns the killed connection's unacknowledged messages.
    let (in_error, in_input) = eventually("every message accounted for", WAIT, || async {
        let e = probe.queue_count(&error).await.unwrap() as usize;
        let i = probe.queue_count(&q).await.unwrap() as usize;
        (e + i >= COUNT).then_some((e, i))
    })
    .await;
    assert!(in_input >= 5, "it replayed some before it died: {in_input}");
    let error_ids: Vec<String> = if in_error > 0 {
        ids_of(&json_lines(&success(
            &run(&["errors", "list", &q, "--json"]).await,
        )))
    } else {
        Vec::new()
    };
    let mut input_ids = Vec::new();
    while let Some(m) = probe.get(&q).await {
        input_ids.push(
            m.delivery
                .properties
                .message_id()
                .as_ref()
                .unwrap()
                .to_string(),
        );
    }
    let mut all: Vec<String> = error_ids.iter().chain(&input_ids).cloned().collect();
    all.sort();
    all.dedup();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(all, expected, "none lost");
    let both = error_ids.iter().filter(|id| input_ids.contains(id)).count();
    assert!(both <= 1, "{both} messages are in both queues");
    let mut unique_input = input_ids.clone();
    unique_input.sort();
    unique_input.dedup();
    assert_eq!(
        unique_input.len(),
        input_ids.len(),
        "no message was replayed twice"
    );
    // The error queue kept its order.
    let order: Vec<&String> = ids.iter().filter(|id| error_ids.contains(id)).collect();
    assert_eq!(order, error_ids.iter().collect::<Vec<_>>());
    probe.cleanup().await;
}
